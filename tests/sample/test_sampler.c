/* The sampler chain: greedy, bias, penalties, each truncation stage, the
 * temperature, the seeded draw, and that samplers never share state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sampler *make(const sample_params *p, int32_t n_vocab)
{
    sampler *s = NULL;
    strata_err err;
    if (sampler_new(&s, p, n_vocab, &err) != 0) fail_msg("%s", err.msg);
    return s;
}

static sample_params plain(float temperature)
{
    sample_params p = {.temperature = temperature, .top_p = 1.0f, .typical_p = 1.0f,
                       .repeat_penalty = 1.0f, .penalty_last_n = 64, .seed = 42};
    return p;
}

/* Draws n tokens and counts them per id. */
static void histogram(sampler *s, const float *logits, int n, int *counts)
{
    for (int i = 0; i < n; i++) {
        int32_t t = sampler_sample(s, logits);
        counts[t]++;
    }
}

/* Counts of draws tokens drawn from logits by a fresh sampler of p. */
static void draw_counts(const sample_params *p, const float *logits, int32_t n_vocab, int draws, int *counts)
{
    sampler *s = make(p, n_vocab);
    memset(counts, 0, (size_t)n_vocab * sizeof(int));
    histogram(s, logits, draws, counts);
    sampler_free(s);
}

static void test_greedy_bias_and_ties(void **state)
{
    (void)state;
    float logits[6] = {0.1f, 2.0f, 3.0f, 3.0f, -1.0f, 0.0f};
    sample_params p = plain(0.0f);
    sampler *s = make(&p, 6);
    assert_int_equal(sampler_sample(s, logits), 2); /* tie between 2 and 3: lower id */
    sampler_free(s);

    sample_bias bias[2] = {{2, -INFINITY}, {4, 4.5f}};
    p.bias = bias;
    p.n_bias = 2;
    s = make(&p, 6);
    assert_int_equal(sampler_sample(s, logits), 4); /* -1 + 4.5 beats 3.0; 2 is banned */
    assert_true(logits[4] == -1.0f); /* the caller's logits are not modified */
    sampler_free(s);

    sample_bias bad = {6, 1.0f};
    p.bias = &bad;
    p.n_bias = 1;
    sampler *none = NULL;
    strata_err err;
    assert_int_equal(sampler_new(&none, &p, 6, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "token 6"));
    assert_null(none);
}

static void test_penalties(void **state)
{
    (void)state;
    float logits[4] = {2.0f, 1.9f, -0.5f, 0.0f};
    sample_params p = plain(0.0f);
    p.repeat_penalty = 1.1f; /* 2.0 / 1.1 = 1.818 < 1.9 */
    sampler *s = make(&p, 4);
    assert_int_equal(sampler_sample(s, logits), 0);
    sampler_accept(s, 0);
    assert_int_equal(sampler_sample(s, logits), 1);
    sampler_free(s);

    /* frequency: 2.0 - 2 * 0.06 = 1.88 < 1.9 after two occurrences, not one */
    p = plain(0.0f);
    p.frequency_penalty = 0.06f;
    s = make(&p, 4);
    sampler_accept(s, 0);
    assert_int_equal(sampler_sample(s, logits), 0);
    sampler_accept(s, 0);
    assert_int_equal(sampler_sample(s, logits), 1);
    sampler_free(s);

    /* presence: once is enough, and the window forgets */
    p = plain(0.0f);
    p.presence_penalty = 0.2f;
    p.penalty_last_n = 2;
    s = make(&p, 4);
    sampler_accept(s, 0);
    assert_int_equal(sampler_sample(s, logits), 1);
    sampler_accept(s, 3);
    sampler_accept(s, 3); /* token 0 has left the window of 2 */
    assert_int_equal(sampler_sample(s, logits), 0);
    sampler_free(s);

    /* a negative logit is multiplied by the repeat penalty (pushed down) */
    float neg[3] = {-1.0f, -1.05f, -3.0f};
    p = plain(0.0f);
    p.repeat_penalty = 1.1f;
    s = make(&p, 3);
    sampler_accept(s, 0);
    assert_int_equal(sampler_sample(s, neg), 1);
    sampler_free(s);
}

static void test_distribution_matches_softmax(void **state)
{
    (void)state;
    float logits[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    sample_params p = plain(1.0f);
    sampler *s = make(&p, 3);
    int counts[3] = {0};
    histogram(s, logits, 20000, counts);
    assert_true(fabs(counts[0] / 20000.0 - 0.5) < 0.02);
    assert_true(fabs(counts[1] / 20000.0 - 0.3) < 0.02);
    assert_true(fabs(counts[2] / 20000.0 - 0.2) < 0.02);
    sampler_free(s);

    /* temperature 0.5 squares the odds: 25 : 9 : 4 */
    p.temperature = 0.5f;
    s = make(&p, 3);
    memset(counts, 0, sizeof(counts));
    histogram(s, logits, 20000, counts);
    assert_true(fabs(counts[0] / 20000.0 - 25.0 / 38) < 0.02);
    assert_true(fabs(counts[2] / 20000.0 - 4.0 / 38) < 0.02);
    sampler_free(s);
}

static void test_truncation_stages(void **state)
{
    (void)state;
    float logits[5] = {logf(0.4f), logf(0.25f), logf(0.2f), logf(0.1f), logf(0.05f)};
    int counts[5];

    sample_params p = plain(1.0f);
    p.top_k = 2;
    sampler *s = make(&p, 5);
    memset(counts, 0, sizeof(counts));
    histogram(s, logits, 4000, counts);
    assert_int_equal(counts[2] + counts[3] + counts[4], 0);
    assert_true(counts[0] > 0 && counts[1] > 0);
    sampler_free(s);

    p = plain(1.0f);
    p.top_p = 0.6f; /* 0.4 + 0.25 reaches it: {0, 1} */
    s = make(&p, 5);
    memset(counts, 0, sizeof(counts));
    histogram(s, logits, 4000, counts);
    assert_int_equal(counts[2] + counts[3] + counts[4], 0);
    assert_true(counts[1] > 0);
    sampler_free(s);

    p = plain(1.0f);
    p.min_p = 0.3f; /* p >= 0.12: {0, 1, 2} */
    s = make(&p, 5);
    memset(counts, 0, sizeof(counts));
    histogram(s, logits, 4000, counts);
    assert_int_equal(counts[3] + counts[4], 0);
    assert_true(counts[2] > 0);
    sampler_free(s);

    /* Typical: entropy of this distribution is 1.43 nats; surprisals are
     * 0.92, 1.39, 1.61, 2.30, 3.00: the most typical is token 1, then 2.
     * typical_p 0.4 keeps 1 and 2 (0.45) and drops the most likely token. */
    p = plain(1.0f);
    p.typical_p = 0.4f;
    s = make(&p, 5);
    memset(counts, 0, sizeof(counts));
    histogram(s, logits, 4000, counts);
    assert_int_equal(counts[0] + counts[3] + counts[4], 0);
    assert_true(counts[1] > 0 && counts[2] > 0);
    sampler_free(s);

    /* top-k 1 is greedy at any temperature */
    p = plain(5.0f);
    p.top_k = 1;
    s = make(&p, 5);
    for (int i = 0; i < 100; i++) assert_int_equal(sampler_sample(s, logits), 0);
    sampler_free(s);
}

/* llama.cpp's further stages: top-n-sigma, XTC, the dynamic temperature */
static void test_sigma_xtc_dynatemp(void **state)
{
    (void)state;
    /* logits 4, 3.5, 1, 0, 0: mean 1.7, population std 1.72; one sigma
     * keeps logit >= 4 - 1.72 = 2.28: tokens 0 and 1 */
    float logits[5] = {4.0f, 3.5f, 1.0f, 0.0f, 0.0f};
    int counts[5];
    sample_params p = plain(1.0f);
    p.top_n_sigma = 1.0f;
    draw_counts(&p, logits, 5, 4000, counts);
    assert_int_equal(counts[2] + counts[3] + counts[4], 0);
    assert_true(counts[0] > 0 && counts[1] > 0);
    p.top_n_sigma = 3.0f; /* 4 - 5.16 < 0: all kept */
    draw_counts(&p, logits, 5, 20000, counts);
    for (int i = 0; i < 5; i++) assert_true(counts[i] > 0);

    /* XTC: probabilities 0.4 0.25 0.2 0.1 0.05; threshold 0.15 marks
     * tokens 0..2, of which 0 and 1 go when it fires (always, at
     * probability 1): 2, 3 and 4 are left */
    float pl[5] = {logf(0.4f), logf(0.25f), logf(0.2f), logf(0.1f), logf(0.05f)};
    p = plain(1.0f);
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.15f;
    draw_counts(&p, pl, 5, 6000, counts);
    assert_int_equal(counts[0] + counts[1], 0);
    assert_true(counts[2] > counts[3] && counts[3] > counts[4] && counts[4] > 0);
    /* greedy with XTC: the least likely of the marked tokens */
    p.temperature = 0.0f;
    sampler *s = make(&p, 5);
    for (int i = 0; i < 50; i++) assert_int_equal(sampler_sample(s, pl), 2);
    sampler_free(s);
    /* only one token over the threshold: nothing goes */
    p = plain(0.0f);
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.3f;
    s = make(&p, 5);
    assert_int_equal(sampler_sample(s, pl), 0);
    sampler_free(s);
    /* a threshold over 0.5 is off (greedy stays the argmax); so is
     * probability 0, which draws nothing from the stream */
    p.xtc_threshold = 0.6f;
    s = make(&p, 5);
    assert_int_equal(sampler_sample(s, pl), 0);
    sampler_free(s);
    /* about half the tokens at probability 0.5 */
    p = plain(1.0f);
    p.xtc_probability = 0.5f;
    p.xtc_threshold = 0.15f;
    draw_counts(&p, pl, 5, 8000, counts);
    /* token 0: 0.4 of the half where XTC does not fire */
    assert_true(counts[0] > 1400 && counts[0] < 1800);

    /* dynamic temperature: the range over a temperature of 0 samples (at
     * most at the range's temperature), and an exponent that sends the
     * normalised entropy to 0 is greedy */
    p = plain(0.0f);
    p.dynatemp_range = 2.0f;
    p.dynatemp_exponent = 1.0f;
    draw_counts(&p, pl, 5, 4000, counts);
    assert_true(counts[0] < 4000 && counts[4] > 0);
    p.dynatemp_exponent = 1000.0f; /* entropy/max < 1: powf gives 0, temperature 0 */
    s = make(&p, 5);
    for (int i = 0; i < 50; i++) assert_int_equal(sampler_sample(s, pl), 0);
    sampler_free(s);
    /* the temperature follows the entropy: a flat distribution samples at
     * t + range, so its draws match plain sampling at that temperature */
    float flat[4] = {0, 0, 0, 0};
    p = plain(0.5f);
    p.dynatemp_range = 0.5f;
    sampler *a = make(&p, 4);
    sample_params q = plain(1.0f);
    sampler *b = make(&q, 4);
    for (int i = 0; i < 200; i++) assert_int_equal(sampler_sample(a, flat), sampler_sample(b, flat));
    sampler_free(a);
    sampler_free(b);
}

/* Mirostat 1.0 and 2.0: a low target surprise keeps the best token only
 * at first, a high one samples the whole softmax; mu moves with each draw;
 * penalties do not apply (llama.cpp's chain) */
static void test_mirostat(void **state)
{
    (void)state;
    float pl[5] = {logf(0.4f), logf(0.25f), logf(0.2f), logf(0.1f), logf(0.05f)};
    int counts[5];
    for (int version = 1; version <= 2; version++) {
        sample_params p = plain(1.0f);
        p.mirostat = version;
        p.mirostat_tau = 0.4f; /* mu 0.8: only tokens of p >= 0.57 for v2 */
        p.mirostat_eta = 0.1f;
        sampler *s = make(&p, 5);
        for (int i = 0; i < 3; i++) assert_int_equal(sampler_sample(s, pl), 0);
        sampler_free(s);
        p.mirostat_tau = 3.0f; /* above the entropy (2.04 bits): everything kept, the softmax */
        draw_counts(&p, pl, 5, 8000, counts);
        const double want[5] = {0.4, 0.25, 0.2, 0.1, 0.05};
        for (int i = 0; i < 5; i++) {
            double got = counts[i] / 8000.0;
            if (fabs(got - want[i]) > 0.03) fail_msg("mirostat %d token %d: %.3f, want %.3f", version, i, got, want[i]);
        }
        /* penalties are not part of its chain; temperature 0 is the argmax */
        p = plain(0.0f);
        p.mirostat = version;
        p.mirostat_tau = 5.0f;
        p.mirostat_eta = 0.1f;
        p.repeat_penalty = 100.0f;
        p.presence_penalty = 100.0f;
        s = make(&p, 5);
        sampler_accept(s, 0);
        assert_int_equal(sampler_sample(s, pl), 0);
        sampler_free(s);
    }
    /* a target of 1 bit (the softmax's entropy is 2.04): mu settles where
     * about two tokens are kept; the best is drawn more often than its 0.4,
     * the fourth and fifth never (both versions) */
    for (int version = 1; version <= 2; version++) {
        sample_params p = plain(1.0f);
        p.mirostat = version;
        p.mirostat_tau = 1.0f;
        p.mirostat_eta = 0.1f;
        draw_counts(&p, pl, 5, 4000, counts);
        if (!(counts[0] > 2000 && counts[1] > 1000 && counts[3] + counts[4] == 0)) {
            fail_msg("mirostat %d, tau 1: %d %d %d %d %d", version, counts[0], counts[1], counts[2], counts[3],
                     counts[4]);
        }
    }
}

/* The greedy pick after DRY over the window a b c c b c y a b c (a=0,
 * b=1, c=2, y=3; 4 another token): the newest "a b c" also stands at the
 * start, so c (after it there) would extend a repeat of 3; "b c" before
 * y, so y one of 2; "c" before b one of 1 (allowed_length 2: free). */
static int32_t dry_pick(const float *logits, const sample_dry_breaker *br, size_t n_br)
{
    sample_params p = plain(0.0f);
    p.dry_multiplier = 1.0f;
    p.dry_base = 2.0f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = 64;
    p.dry_breakers = br;
    p.n_dry_breakers = n_br;
    sampler *s = make(&p, 5);
    static const int32_t window[10] = {0, 1, 2, 2, 1, 2, 3, 0, 1, 2};
    for (int i = 0; i < 10; i++) sampler_accept(s, window[i]);
    int32_t t = sampler_sample(s, logits);
    sampler_free(s);
    return t;
}

static void test_dry(void **state)
{
    (void)state;
    /* c loses 1 x 2^(3-2) = 2: from 1.5 to -0.5, below a's 0 */
    float c_top[5] = {0, 0, 1.5f, 0, 0};
    assert_int_equal(dry_pick(c_top, NULL, 0), 0);
    /* y loses 2^0 = 1: from 0.9 to -0.1, below the other token's 0.1 */
    float y_top[5] = {0, 0, 0, 0.9f, 0.1f};
    assert_int_equal(dry_pick(y_top, NULL, 0), 4);
    /* b would extend a repeat of 1 only: no penalty */
    float b_top[5] = {0, 0.5f, 0, 0, 0};
    assert_int_equal(dry_pick(b_top, NULL, 0), 1);
    /* a restart sequence at the newest a: repeats reach back 2 tokens at
     * most, so c loses 2^0 = 1 and stays on top */
    sample_dry_breaker at_a = {.head = 0};
    assert_int_equal(dry_pick(c_top, &at_a, 1), 2);
    /* a token that is a restart sequence by itself is never penalised */
    sample_dry_breaker at_y = {.head = 3};
    assert_int_equal(dry_pick(y_top, &at_y, 1), 3);
    /* a two-token restart sequence "y a" (head y, tail a) matches the
     * window too: c's repeat is cut to 2 as with a alone... */
    sample_dry_breaker y_a = {.head = 3, .tail = {0}, .n_tail = 1};
    assert_int_equal(dry_pick(c_top, &y_a, 1), 2);
    /* ...one whose tail does not match (y b) changes nothing */
    sample_dry_breaker y_b = {.head = 3, .tail = {1}, .n_tail = 1};
    assert_int_equal(dry_pick(c_top, &y_b, 1), 0);
    /* off: a multiplier of 0 */
    sample_params p = plain(0.0f);
    p.dry_base = 2.0f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = 64;
    sampler *s = make(&p, 5);
    static const int32_t window[10] = {0, 1, 2, 2, 1, 2, 3, 0, 1, 2};
    for (int i = 0; i < 10; i++) sampler_accept(s, window[i]);
    assert_int_equal(sampler_sample(s, c_top), 2);
    sampler_free(s);
}

static void test_seeded_streams_are_private(void **state)
{
    (void)state;
    enum { V = 1000, N = 200 };
    float *logits = malloc(V * sizeof(float));
    for (int i = 0; i < V; i++) logits[i] = (float)sin(i * 0.37) * 2.0f;
    sample_params p = sample_params_default();
    p.seed = 7;
    int32_t alone[N], mixed_a[N], mixed_b[N];
    sampler *a = make(&p, V);
    for (int i = 0; i < N; i++) {
        alone[i] = sampler_sample(a, logits);
        sampler_accept(a, alone[i]);
    }
    sampler_free(a);

    /* The same seed beside another sampler, interleaved draw by draw. */
    a = make(&p, V);
    sample_params q = p;
    q.seed = 8;
    sampler *b = make(&q, V);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        mixed_b[i] = sampler_sample(b, logits);
        sampler_accept(b, mixed_b[i]);
        mixed_a[i] = sampler_sample(a, logits);
        sampler_accept(a, mixed_a[i]);
        differ += mixed_a[i] != mixed_b[i];
    }
    assert_memory_equal(alone, mixed_a, sizeof(alone));
    assert_true(differ > 0); /* another seed gives another stream */
    sampler_free(a);
    sampler_free(b);
    free(logits);
}

static void test_everything_banned_still_answers(void **state)
{
    (void)state;
    float logits[3] = {1, 2, 3};
    sample_bias bias[3] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}};
    sample_params p = sample_params_default();
    p.bias = bias;
    p.n_bias = 3;
    sampler *s = make(&p, 3);
    int32_t t = sampler_sample(s, logits);
    assert_true(t >= 0 && t < 3);
    sampler_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_bias_and_ties),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_distribution_matches_softmax),
        cmocka_unit_test(test_truncation_stages),
        cmocka_unit_test(test_sigma_xtc_dynatemp),
        cmocka_unit_test(test_mirostat),
        cmocka_unit_test(test_dry),
        cmocka_unit_test(test_seeded_streams_are_private),
        cmocka_unit_test(test_everything_banned_still_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
