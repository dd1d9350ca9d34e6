/* The scale searches behind the quantizers (tensor/quant_internal.h),
 * against brute force:
 *  - tensor_search_scale claims the exact least-squares optimum over all
 *    scales: for random groups, every ladder the quantizers use, with and
 *    without weights, its answer is compared with an enumeration of every
 *    state (every set of codes that is "nearest level for some scale");
 *  - the windowed variant is optimal within its window;
 *  - tensor_search_affine is never worse than the min-max rule;
 *  - the IQ4 nearest-level lookup and the scale packings of Q3_K and
 *    Q4_K/Q5_K round-trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/rng.h"
#include "quant_testutil.h"
#include "tensor/quant_internal.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* The levels of a ladder, ascending, as a plain list. */
static int ladder_levels(const tensor_ladder *lad, float *out)
{
    int n = 0;
    if (lad->table) {
        for (int k = lad->start - lad->n_down; k <= lad->start + lad->n_up; k++)
            out[n++] = (float)lad->table[k];
    } else {
        for (int k = -lad->n_down; k <= lad->n_up; k++)
            out[n++] = (float)k;
    }
    return n;
}

/* Error of the best D for codes "nearest level to x * t" (LS refit). */
static double state_error(const float *x, const float *w, int n, const float *lev, int n_lev,
                          double t)
{
    double sxv = 0, svv = 0, sxx = 0;
    for (int i = 0; i < n; i++) {
        double z = x[i] * t, wi = w ? w[i] : 1.0;
        int best = 0;
        for (int k = 1; k < n_lev; k++)
            if (fabs(z - lev[k]) < fabs(z - lev[best]))
                best = k;
        sxv += wi * x[i] * lev[best];
        svv += wi * (double)lev[best] * lev[best];
        sxx += wi * (double)x[i] * x[i];
    }
    return svv > 0 ? sxx - sxv * sxv / svv : sxx;
}

/* Error of scale D with nearest codes (what a quantizer does with D). */
static double scale_error(const float *x, const float *w, int n, const float *lev, int n_lev,
                          double D)
{
    double err = 0;
    for (int i = 0; i < n; i++) {
        double best = INFINITY, wi = w ? w[i] : 1.0;
        for (int k = 0; k < n_lev; k++) {
            double r = x[i] - D * lev[k];
            if (r * r < best)
                best = r * r;
        }
        err += wi * best;
    }
    return err;
}

/* Minimum error over every state with t = 1/|D| in [t_lo, t_hi]: the
 * states change only where some x_i * t crosses a midpoint between two
 * levels, so evaluating just after every crossing (and at t_lo) covers
 * them all; both signs of t. */
static double brute_force(const float *x, const float *w, int n, const tensor_ladder *lad,
                          double t_lo, double t_hi)
{
    float lev[300];
    int n_lev = ladder_levels(lad, lev);
    double best = INFINITY;
    for (int sgn = -1; sgn <= 1; sgn += 2) {
        if (sgn < 0 && lad->n_down == 0)
            continue;
        double e = state_error(x, w, n, lev, n_lev, sgn * fmax(t_lo, 1e-30));
        best = fmin(best, e);
        for (int i = 0; i < n; i++) {
            if (x[i] == 0)
                continue;
            for (int k = 0; k + 1 < n_lev; k++) {
                double mid = 0.5 * (lev[k] + lev[k + 1]);
                double t = fabs(mid / x[i]) * (1 + 1e-9);
                if (t < t_lo || t > t_hi)
                    continue;
                best = fmin(best, state_error(x, w, n, lev, n_lev, sgn * t));
            }
        }
    }
    return best;
}

static void check_search(strata_rng *r, const tensor_ladder *lad, int n, int weighted,
                         int n_groups)
{
    float lev[300];
    int n_lev = ladder_levels(lad, lev);
    for (int g = 0; g < n_groups; g++) {
        float x[TENSOR_SEARCH_MAX_N], w[TENSOR_SEARCH_MAX_N];
        for (int i = 0; i < n; i++) {
            x[i] = (float)strata_rng_normal(r);
            if (lad->n_down == 0)
                x[i] = fabsf(x[i]); /* unsigned ladders take x >= 0 */
            w[i] = (float)(0.1 + strata_rng_uniform(r));
        }
        if (g % 5 == 0) /* some exact zeros */
            x[g % n] = 0;
        const float *wp = weighted ? w : NULL;
        double want = brute_force(x, wp, n, lad, 0, INFINITY);
        float D = tensor_search_scale(x, wp, n, lad);
        double got = scale_error(x, wp, n, lev, n_lev, D);
        double sxx = 0;
        for (int i = 0; i < n; i++)
            sxx += (wp ? wp[i] : 1.0) * (double)x[i] * x[i];
        if (got > want * (1 + 1e-5) + 1e-9 * sxx)
            fail_msg("ladder %d..%d%s, n %d, group %d: search error %.9g, optimum %.9g",
                     lad->table ? -999 : -lad->n_down, lad->n_up, lad->table ? " (IQ4)" : "", n,
                     g, got, want);
    }
}

static void test_search_is_exact(void **state)
{
    (void)state;
    strata_rng r;
    strata_rng_seed(&r, 11);
    const int groups = TEST_SANITIZED ? 10 : 60;
    tensor_ladder lad;
    lad = tensor_ladder_uniform(-8, 7); /* Q4_0 */
    check_search(&r, &lad, 32, 0, groups);
    lad = tensor_ladder_uniform(-16, 15); /* Q5_0 */
    check_search(&r, &lad, 32, 0, groups);
    lad = tensor_ladder_uniform(-4, 3); /* Q3_K */
    check_search(&r, &lad, 16, 0, groups);
    lad = tensor_ladder_uniform(-32, 31); /* Q6_K codes, Q3_K/IQ4_XS scales */
    check_search(&r, &lad, 16, 1, groups);
    lad = tensor_ladder_uniform(0, 15); /* Q4_1 / Q4_K codes */
    check_search(&r, &lad, 32, 0, groups);
    lad = tensor_ladder_uniform(0, 3); /* Q2_K codes */
    check_search(&r, &lad, 16, 0, groups);
    lad = tensor_ladder_uniform(0, 63); /* K-quant scales, weighted */
    check_search(&r, &lad, 8, 1, groups);
    lad = tensor_ladder_uniform(-128, 127); /* Q6_K scales, weighted */
    check_search(&r, &lad, 16, 1, TEST_SANITIZED ? 3 : 15);
    lad = tensor_ladder_iq4();
    check_search(&r, &lad, 32, 0, groups);
    check_search(&r, &lad, 32, 1, groups);
}

static void test_search_window(void **state)
{
    (void)state;
    strata_rng r;
    strata_rng_seed(&r, 12);
    tensor_ladder lad = tensor_ladder_uniform(-32, 31);
    float lev[64];
    int n_lev = ladder_levels(&lad, lev);
    for (int g = 0; g < 40; g++) {
        float x[16];
        float amax = 0;
        for (int i = 0; i < 16; i++) {
            x[i] = (float)strata_rng_normal(&r);
            amax = fmaxf(amax, fabsf(x[i]));
        }
        double t_lo = 0.6 * 32 / amax, t_hi = 1.1 * 32 / amax;
        double want = brute_force(x, NULL, 16, &lad, t_lo, t_hi);
        float D = tensor_search_scale_in(x, NULL, 16, &lad, (float)t_lo, (float)t_hi);
        assert_true(fabs(1.0 / D) >= t_lo * (1 - 1e-6) * 0.9); /* LS refit may move D a little */
        /* the state the window found, refitted, is at least as good */
        double got = scale_error(x, NULL, 16, lev, n_lev, D);
        assert_true(got <= want * (1 + 1e-5) + 1e-12);
    }
}

static void test_affine_beats_min_max(void **state)
{
    (void)state;
    strata_rng r;
    strata_rng_seed(&r, 13);
    static const int nmaxes[] = {3, 15, 31};
    for (int k = 0; k < 3; k++) {
        int nmax = nmaxes[k];
        for (int g = 0; g < 200; g++) {
            float x[32];
            int n = nmax == 3 ? 16 : 32;
            for (int i = 0; i < n; i++)
                x[i] = (float)strata_rng_normal(&r) + (g % 3 == 0 ? 2.0f : 0.0f);
            for (int min_nonpos = 0; min_nonpos <= 1; min_nonpos++) {
                float s, m;
                tensor_search_affine(x, NULL, n, nmax, min_nonpos, &s, &m);
                float lo = x[0], hi = x[0];
                for (int i = 1; i < n; i++) {
                    lo = fminf(lo, x[i]);
                    hi = fmaxf(hi, x[i]);
                }
                if (min_nonpos)
                    lo = fminf(lo, 0);
                if (min_nonpos)
                    assert_true(m <= 0);
                assert_true(s >= 0);
                double e_ours = 0, e_mm = 0;
                float d_mm = (hi - lo) / (float)nmax;
                for (int i = 0; i < n; i++) {
                    int qo = s > 0 ? tensor_round_clamp((x[i] - m) / s, 0, nmax) : 0;
                    int qm = tensor_round_clamp((x[i] - lo) / d_mm, 0, nmax);
                    e_ours += pow(x[i] - (s * qo + m), 2);
                    e_mm += pow(x[i] - (d_mm * qm + lo), 2);
                }
                if (e_ours > e_mm * (1 + 1e-5) + 1e-10)
                    fail_msg("nmax %d group %d: affine error %.9g > min-max %.9g", nmax, g, e_ours,
                             e_mm);
            }
        }
    }
    /* all equal: exact with s = 0 */
    float same[32];
    for (int i = 0; i < 32; i++)
        same[i] = -2.5f;
    float s, m;
    tensor_search_affine(same, NULL, 32, 15, 1, &s, &m);
    assert_true(s == 0 && m == -2.5f);
}

static void test_iq4_nearest(void **state)
{
    (void)state;
    for (float z = -200; z <= 200; z += 0.03125f) {
        int got = tensor_iq4_nearest(z), best = 0;
        for (int k = 1; k < 16; k++)
            if (fabsf(z - tensor_iq4nl_values[k]) < fabsf(z - tensor_iq4nl_values[best]))
                best = k;
        /* exact midpoints may go either way; elsewhere it must be the nearest */
        if (got != best && fabsf(z - tensor_iq4nl_values[got]) != fabsf(z - tensor_iq4nl_values[best]))
            fail_msg("z = %g: level %d, nearest is %d", (double)z, got, best);
    }
    assert_int_equal(tensor_iq4_nearest(NAN), 0);
}

static void test_scale_packing(void **state)
{
    (void)state;
    /* Q4_K/Q5_K: every value in 0..63 survives in every slot */
    for (int v = 0; v < 64; v++) {
        uint8_t sc[8], mn[8], packed[12];
        for (int j = 0; j < 8; j++) {
            sc[j] = (uint8_t)((v + 7 * j) % 64);
            mn[j] = (uint8_t)((v + 13 * j + 5) % 64);
        }
        tensor_k_scale_put(packed, sc, mn);
        for (int j = 0; j < 8; j++) {
            int a, b;
            tensor_k_scale_get(packed, j, &a, &b);
            assert_int_equal(a, sc[j]);
            assert_int_equal(b, mn[j]);
        }
        /* Q3_K: 16 six-bit scales in 12 bytes */
        uint8_t st[16], p3[12];
        for (int j = 0; j < 16; j++)
            st[j] = (uint8_t)((v + 11 * j) % 64);
        tensor_q3k_scale_put(p3, st);
        for (int j = 0; j < 16; j++)
            assert_int_equal(tensor_q3k_scale_get(p3, j), st[j]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_is_exact),
        cmocka_unit_test(test_search_window),
        cmocka_unit_test(test_affine_beats_min_max),
        cmocka_unit_test(test_iq4_nearest),
        cmocka_unit_test(test_scale_packing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
