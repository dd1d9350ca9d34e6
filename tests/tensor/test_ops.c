/* Tests of the element ops (src/tensor/ops.h).
 *
 * Every variant table this machine can run (the scalar reference, and AVX2
 * where present) is checked against a double-precision evaluation of the
 * op's formula with the TENSOR_TOL_* bounds of ops.h; the variants are then
 * checked against each other (bit-exact where ops.h promises it), against
 * GGML's rope order, for determinism whatever the pointers' alignment, and
 * for never writing outside [out, out + n). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "tensor/ops.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* --- helpers --- */

/* The distinct tables this machine can run, scalar first. */
static int variants(const tensor_ops *out[3])
{
    int n = 0;
    for (int level = STRATA_SIMD_SCALAR; level <= STRATA_SIMD_AVX512; level++) {
        const tensor_ops *t = tensor_ops_for_level((enum strata_simd_level)level);
        if (t == NULL) continue;
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= out[j] == t;
        if (!dup) out[n++] = t;
    }
    return n;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static void rng_seed(uint64_t seed)
{
    g_rng = seed;
}

/* splitmix64: a fixed sequence, so every run sees the same inputs. */
static uint64_t rng_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-r, r). */
static float rng_f(double r)
{
    return (float)(((double)(rng_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0) * r);
}

static void fill(float *x, int64_t n, double r)
{
    for (int64_t i = 0; i < n; i++) x[i] = rng_f(r);
}

static float *row_new(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    return p;
}

static void expect_close(const char *op, const char *variant, int64_t n, int64_t i, float got,
                         double want, double tol)
{
    if (isnan(want)) {
        if (!isnan(got)) fail_msg("%s[%s] n=%lld i=%lld: got %.9g, want NaN", op, variant, (long long)n, (long long)i, got);
        return;
    }
    if (isinf(want)) {
        if (got != want) fail_msg("%s[%s] n=%lld i=%lld: got %.9g, want %g", op, variant, (long long)n, (long long)i, got, want);
        return;
    }
    double err = fabs((double)got - want);
    if (!(err <= tol))
        fail_msg("%s[%s] n=%lld i=%lld: got %.9g, want %.17g (|err| %.3g > tol %.3g)", op, variant,
                 (long long)n, (long long)i, got, want, err, tol);
}

static int same_bits(const float *a, const float *b, int64_t n)
{
    return n <= 0 || memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* The exact functions, in double, of float inputs. */
static double ref_silu(double x) { return x / (1.0 + exp(-x)); }
static double ref_gelu_y2(double x) { return 2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x); }
/* 0.5 x (1 + tanh(y)) = x / (1 + e^-2y); the second form has no
 * cancellation for negative x, even in double. */
static double ref_gelu(double x) { return x / (1.0 + exp(-ref_gelu_y2(x))); }

/* --- exp, silu, gelu, swiglu --- */

static void test_exp_accuracy_over_a_sweep_of_floats(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    enum { N = 4096 };
    float *x = row_new(N), *y = row_new(N);
    for (int k = 0; k < n_var; k++) {
        /* Every 4099th bit pattern whose value is in (-104, 89): ~550000
         * floats of every exponent, into the subnormal results and up to
         * overflow. */
        int64_t n_in = 0, n_checked = 0;
        for (uint64_t u = 0; u < 0x100000000ull; u += 4099) {
            uint32_t bits = (uint32_t)u;
            float f;
            memcpy(&f, &bits, sizeof f);
            if (f > -104.0f && f < 89.0f) x[n_in++] = f;
            if (n_in == N || (u + 4099 >= 0x100000000ull && n_in > 0)) {
                v[k]->exp(y, x, n_in);
                for (int64_t i = 0; i < n_in; i++) {
                    double want = exp((double)x[i]);
                    if (want > FLT_MAX) want = INFINITY;
                    double tol = want < FLT_MIN ? TENSOR_TOL_EXP_ABS : TENSOR_TOL_EXP_REL * want;
                    expect_close("exp", v[k]->name, n_in, i, y[i], want, tol);
                }
                n_checked += n_in;
                n_in = 0;
            }
        }
        assert_true(n_checked > 500000);

        const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1000.0f, -1000.0f, 88.72f, 88.73f};
        const double want[] = {1.0, 1.0, INFINITY, 0.0, NAN, INFINITY, 0.0, exp(88.72f), INFINITY};
        v[k]->exp(y, special, 9);
        for (int i = 0; i < 9; i++) expect_close("exp special", v[k]->name, 9, i, y[i], want[i], TENSOR_TOL_EXP_REL * fabs(want[i]));
        assert_true(y[0] == 1.0f && y[1] == 1.0f); /* e^0 is exactly 1 */
    }
    free(x);
    free(y);
}

/* c tanh(x / c) for the caps Gemma 2 uses (30 on the logits, 50 on the
 * attention scores) and a small one, over inputs from well inside the cap
 * to far beyond it, against tanh in double; then the exact points. */
static void test_softcap_matches_tanh(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    enum { N = 20003 };
    float *x = row_new(N), *y = row_new(N);
    const float caps[] = {30.0f, 50.0f, 0.75f};
    for (int k = 0; k < n_var; k++) {
        double worst = 0.0;
        for (int ci = 0; ci < 3; ci++) {
            const float c = caps[ci];
            for (int rep = 0; rep < 4; rep++) {
                rng_seed(300 + (uint64_t)rep);
                fill(x, N, (rep + 1) * 1.5 * c);
                x[0] = 1e-30f; /* tiny inputs, where 1 - e^-2|y| cancels */
                x[1] = -3e-6f * c;
                memcpy(y, x, (size_t)N * sizeof(float));
                v[k]->softcap(y, c, N);
                for (int64_t i = 0; i < N; i++) {
                    double want = (double)c * tanh((double)x[i] / (double)c);
                    double err = fabs((double)y[i] - want) / c;
                    if (err > worst) worst = err;
                    expect_close("softcap", v[k]->name, N, i, y[i], want, TENSOR_TOL_SOFTCAP_ABS * c);
                    assert_true(fabsf(y[i]) <= c);
                    if (x[i] != 0.0f) assert_true((y[i] < 0) == (x[i] < 0)); /* odd */
                }
            }
        }
        printf("softcap %s: worst error %.3g c\n", v[k]->name, worst);
        float s[6] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f};
        v[k]->softcap(s, 30.0f, 6);
        assert_true(s[0] == 0.0f && s[1] == 0.0f && s[2] == 30.0f && s[3] == -30.0f && isnan(s[4]) &&
                    s[5] == 30.0f);
    }
    free(x);
    free(y);
}

static void test_silu_gelu_swiglu_match_the_exact_functions(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    enum { N = 20000 };
    float *x = row_new(N), *u = row_new(N), *y = row_new(N);
    for (int k = 0; k < n_var; k++) {
        const char *name = v[k]->name;
        for (int rep = 0; rep < 6; rep++) {
            rng_seed(100 + (uint64_t)rep);
            fill(x, N, rep < 2 ? 4.0 : rep < 4 ? 16.0 : 120.0);
            fill(u, N, 3.0);

            v[k]->silu(y, x, N);
            for (int64_t i = 0; i < N; i++) {
                double want = ref_silu(x[i]);
                expect_close("silu", name, N, i, y[i], want, TENSOR_TOL_SILU_REL * fabs(want) + TENSOR_TOL_ACT_ABS);
            }
            v[k]->gelu(y, x, N);
            for (int64_t i = 0; i < N; i++) {
                double want = ref_gelu(x[i]);
                double tol = TENSOR_TOL_GELU_REL * (1.0 + fabs(ref_gelu_y2(x[i]))) * fabs(want);
                expect_close("gelu", name, N, i, y[i], want, tol + TENSOR_TOL_ACT_ABS);
            }
            v[k]->swiglu(y, x, u, N);
            for (int64_t i = 0; i < N; i++) {
                double want = ref_silu(x[i]) * u[i];
                expect_close("swiglu", name, N, i, y[i], want, TENSOR_TOL_SWIGLU_REL * fabs(want) + TENSOR_TOL_ACT_ABS);
            }
        }

        /* Points where the functions are known exactly. */
        const float special[] = {0.0f, INFINITY, NAN, 200.0f, -200.0f};
        float s[5], ones[5] = {1, 1, 1, 1, 1};
        v[k]->silu(s, special, 5);
        assert_true(s[0] == 0.0f && s[1] == INFINITY && isnan(s[2]) && s[3] == 200.0f && s[4] == 0.0f);
        v[k]->gelu(s, special, 5);
        assert_true(s[0] == 0.0f && s[1] == INFINITY && isnan(s[2]) && s[3] == 200.0f && s[4] == 0.0f);
        v[k]->swiglu(s, special, ones, 5);
        assert_true(s[0] == 0.0f && s[1] == INFINITY && isnan(s[2]) && s[3] == 200.0f && s[4] == 0.0f);
        /* GGML's own formula where it is accurate: 0.5 x (1 + tanh(...)). */
        const float g_in[] = {1.0f, 0.5f, 2.0f, -0.5f};
        v[k]->gelu(s, g_in, 4);
        for (int i = 0; i < 4; i++) {
            double xd = g_in[i];
            double ggml = 0.5 * xd * (1.0 + tanh(0.7978845608028654 * xd * (1.0 + 0.044715 * xd * xd)));
            expect_close("gelu vs ggml formula", name, 4, i, s[i], ggml, 1e-6 * fabs(ggml));
        }
    }
    free(x);
    free(u);
    free(y);
}

/* --- rmsnorm --- */

static void test_rmsnorm_matches_double_reference(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    const int64_t sizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 67, 100, 4096, 5123};
    const double scales[] = {1e-3, 1.0, 300.0};
    float *x = row_new(5123), *w = row_new(5123), *y = row_new(5123);
    for (int k = 0; k < n_var; k++) {
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            for (int sc = 0; sc < 3; sc++) {
                int64_t n = sizes[si];
                rng_seed((uint64_t)(n * 7 + sc));
                fill(x, n, scales[sc]);
                fill(w, n, 2.0);
                const float eps = 1e-5f;
                double ss = 0;
                for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
                double inv = 1.0 / sqrt(ss / (double)n + (double)eps);
                for (int with_w = 0; with_w < 2; with_w++) {
                    v[k]->rmsnorm(y, x, with_w ? w : NULL, n, eps);
                    for (int64_t i = 0; i < n; i++) {
                        double want = x[i] * inv * (with_w ? w[i] : 1.0);
                        expect_close(with_w ? "rmsnorm" : "rmsnorm (no w)", v[k]->name, n, i, y[i], want,
                                     TENSOR_TOL_RMSNORM_REL * fabs(want));
                    }
                }
            }
        }
        /* A row of zeros: 0 * 1/sqrt(eps) = 0, not NaN. A constant row
         * normalises to 1 (with eps 0). */
        for (int i = 0; i < 37; i++) x[i] = 0.0f;
        v[k]->rmsnorm(y, x, NULL, 37, 1e-6f);
        for (int i = 0; i < 37; i++) assert_true(y[i] == 0.0f);
        for (int i = 0; i < 37; i++) x[i] = -3.0f;
        v[k]->rmsnorm(y, x, NULL, 37, 0.0f);
        for (int i = 0; i < 37; i++) expect_close("rmsnorm const", v[k]->name, 37, i, y[i], -1.0, 2e-7);
    }
    free(x);
    free(w);
    free(y);
}

/* --- softmax --- */

static void softmax_check(const tensor_ops *t, const float *x, int64_t n, const char *what)
{
    float *y = row_new(n);
    memcpy(y, x, (size_t)n * sizeof(float));
    t->softmax(y, n);
    double max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - max;
        double want = exp(d) / sum;
        double tol = TENSOR_TOL_SOFTMAX_REL * (1.0 + fabs(d)) * want + TENSOR_TOL_SOFTMAX_ABS;
        if (x[i] == -INFINITY) {
            want = 0.0;
            tol = 0.0;
        }
        expect_close(what, t->name, n, i, y[i], want, tol);
        total += y[i];
    }
    /* Each output within 4e-7 relative: the sum is within that of 1. */
    if (!(fabs(total - 1.0) <= 1e-6)) fail_msg("%s[%s] n=%lld: sum %.9f", what, t->name, (long long)n, total);
    free(y);
}

static void test_softmax_stable_and_normalised(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    float *x = row_new(4100);
    for (int k = 0; k < n_var; k++) {
        const tensor_ops *t = v[k];
        for (int64_t n = 1; n <= 67; n++) {
            rng_seed((uint64_t)n);
            fill(x, n, 8.0);
            softmax_check(t, x, n, "softmax");
        }
        const double spreads[] = {1.0, 30.0, 1000.0};
        for (int s = 0; s < 3; s++) {
            rng_seed(77 + (uint64_t)s);
            fill(x, 4099, spreads[s]);
            softmax_check(t, x, 4099, "softmax wide");
        }
        /* Large values: only differences matter (no overflow). */
        for (int i = 0; i < 50; i++) x[i] = 1e30f + (float)i * 1e23f;
        softmax_check(t, x, 50, "softmax 1e30");
        for (int i = 0; i < 20; i++) x[i] = (i % 2) ? 3e38f : -3e38f;
        softmax_check(t, x, 20, "softmax +-3e38");
        x[0] = 80.0f, x[1] = 80.0f, x[2] = 0.0f;
        softmax_check(t, x, 3, "softmax 80");

        /* -inf entries (masked attention) give exactly 0 and the rest is
         * normalised as if they were absent. */
        rng_seed(5);
        fill(x, 45, 5.0);
        float kept[45];
        int64_t n_kept = 0;
        for (int i = 0; i < 45; i++) {
            if (i % 3 == 1) x[i] = -INFINITY;
            else kept[n_kept++] = x[i];
        }
        softmax_check(t, x, 45, "softmax -inf");
        float y[45];
        memcpy(y, x, sizeof y);
        t->softmax(y, 45);
        float yk[45];
        memcpy(yk, kept, sizeof(float) * (size_t)n_kept);
        t->softmax(yk, n_kept);
        for (int i = 0, j = 0; i < 45; i++) {
            if (i % 3 == 1) assert_true(y[i] == 0.0f);
            else {
                expect_close("softmax -inf vs absent", t->name, 45, i, y[i], yk[j], 4e-7 * yk[j]);
                j++;
            }
        }

        /* Fully masked: zeros, not NaN. One element: exactly 1. Equal
         * values: uniform. */
        for (int i = 0; i < 13; i++) y[i] = -INFINITY;
        t->softmax(y, 13);
        for (int i = 0; i < 13; i++) assert_true(y[i] == 0.0f);
        y[0] = -12345.0f;
        t->softmax(y, 1);
        assert_true(y[0] == 1.0f);
        for (int i = 0; i < 40; i++) y[i] = 2.5f;
        t->softmax(y, 40);
        for (int i = 0; i < 40; i++) assert_true(y[i] == 1.0f / 40.0f);
        /* A NaN or +inf entry poisons the row (as it does the math). */
        for (int bad = 0; bad < 2; bad++) {
            for (int i = 0; i < 20; i++) y[i] = (float)i;
            y[11] = bad ? INFINITY : NAN;
            t->softmax(y, 20);
            for (int i = 0; i < 20; i++) assert_true(isnan(y[i]));
        }
    }
    free(x);
}

/* --- add, mul, scale: exact --- */

static void test_add_mul_scale_are_exact(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    float a[300], b[300], y[300], z[300];
    for (int k = 0; k < n_var; k++) {
        for (int64_t n = 0; n < 300; n += (n < 70 ? 1 : 37)) {
            rng_seed(1000 + (uint64_t)n);
            fill(a, n, 1e3);
            fill(b, n, 1e-2);
            v[k]->add(y, a, b, n);
            for (int64_t i = 0; i < n; i++) if (y[i] != a[i] + b[i]) fail_msg("add[%s] n=%lld i=%lld", v[k]->name, (long long)n, (long long)i);
            v[k]->mul(y, a, b, n);
            for (int64_t i = 0; i < n; i++) if (y[i] != a[i] * b[i]) fail_msg("mul[%s] n=%lld i=%lld", v[k]->name, (long long)n, (long long)i);
            memcpy(y, a, sizeof(float) * (size_t)n);
            v[k]->scale(y, 0.3f, n);
            for (int64_t i = 0; i < n; i++) if (y[i] != a[i] * 0.3f) fail_msg("scale[%s] n=%lld i=%lld", v[k]->name, (long long)n, (long long)i);
            /* In place: out == a. */
            memcpy(z, a, sizeof(float) * (size_t)n);
            v[k]->add(z, z, b, n);
            v[k]->add(y, a, b, n);
            assert_true(same_bits(y, z, n));
        }
    }
}

/* --- dot --- */

static void test_dot_within_bound_and_exact_on_integers(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    float *a = row_new(9000), *b = row_new(9000);
    for (int k = 0; k < n_var; k++) {
        assert_true(v[k]->dot_f32(a, b, 0) == 0.0f);
        for (int64_t n = 1; n < 9000; n = n < 70 ? n + 1 : n * 3 / 2) {
            rng_seed(2000 + (uint64_t)n);
            fill(a, n, 1.0);
            fill(b, n, 1.0);
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                want += (double)a[i] * b[i];
                mag += fabs((double)a[i] * b[i]);
            }
            expect_close("dot", v[k]->name, n, 0, v[k]->dot_f32(a, b, n), want, TENSOR_TOL_DOT(n) * mag);

            /* Small integers: every partial sum is exact, so the result is. */
            int64_t isum = 0;
            for (int64_t i = 0; i < n; i++) {
                int ia = (int)(rng_u64() % 17) - 8, ib = (int)(rng_u64() % 17) - 8;
                a[i] = (float)ia;
                b[i] = (float)ib;
                isum += ia * ib;
            }
            float got = v[k]->dot_f32(a, b, n);
            if (got != (float)isum) fail_msg("dot[%s] n=%lld: %g != %lld", v[k]->name, (long long)n, got, (long long)isum);
        }
    }
    free(a);
    free(b);
}

/* The documented order, written out independently of ops.c. */
static float dot_documented_order(const float *a, const float *b, int64_t n)
{
    float lane[32];
    for (int j = 0; j < 32; j++) lane[j] = 0.0f;
    for (int64_t i = 0; i < n; i++) lane[i % 32] = fmaf(a[i], b[i], lane[i % 32]);
    for (int step = 16; step >= 1; step /= 2)
        for (int j = 0; j < step; j++) lane[j] += lane[j + step];
    return lane[0];
}

static void test_dot_follows_the_documented_order(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    float *a = row_new(3000), *b = row_new(3000);
    for (int k = 0; k < n_var; k++) {
        for (int64_t n = 1; n < 3000; n = n < 100 ? n + 1 : n + 97) {
            rng_seed(3000 + (uint64_t)n);
            /* Mixed magnitudes, so a different order would round differently. */
            for (int64_t i = 0; i < n; i++) {
                a[i] = rng_f(1.0) * (float)(1 << (rng_u64() % 20));
                b[i] = rng_f(1.0);
            }
            float want = dot_documented_order(a, b, n), got = v[k]->dot_f32(a, b, n);
            if (memcmp(&want, &got, sizeof got) != 0)
                fail_msg("dot[%s] n=%lld: %.9g, the documented order gives %.9g", v[k]->name, (long long)n, got, want);
        }
    }
    free(a);
    free(b);
}

/* --- rope --- */

/* GGML's rope (ggml_compute_forward_rope_f32 with ext_factor 0 and
 * attn_factor 1: ggml_rope_cache_init, rope_yarn, then the rotation),
 * transcribed loop for loop. */
static void rope_ggml(float *x, int n_head, int head_dim, int n_dims, int64_t pos, float freq_base,
                      float freq_scale, const float *freq_factors, int mode)
{
    float cache[1024];
    const float theta_scale = powf(freq_base, -2.0f / n_dims);
    float theta = (float)pos;
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
        const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
        float theta_extrap = theta / ff;
        float theta_interp = freq_scale * theta_extrap;
        cache[i0 + 0] = cosf(theta_interp) * 1.0f;
        cache[i0 + 1] = sinf(theta_interp) * 1.0f;
        theta *= theta_scale;
    }
    for (int h = 0; h < n_head; h++) {
        float *src = x + (int64_t)h * head_dim;
        for (int i0 = 0; i0 < n_dims; i0 += 2) {
            const float cos_theta = cache[i0 + 0], sin_theta = cache[i0 + 1];
            int a = mode == TENSOR_ROPE_NEOX ? i0 / 2 : i0;
            int b = mode == TENSOR_ROPE_NEOX ? i0 / 2 + n_dims / 2 : i0 + 1;
            const float x0 = src[a], x1 = src[b];
            src[a] = x0 * cos_theta - x1 * sin_theta;
            src[b] = x0 * sin_theta + x1 * cos_theta;
        }
    }
}

/* The rotation in double with the exact angle, and a bound on how far
 * GGML's float angle may be from it (see tensor_rope in ops.h):
 *  - theta_scale = powf(base, -2.0f/n_rot): the rounded exponent moves it by
 *    |ln(base) 2/n_rot| 2^-24 relative and powf adds < 1 ulp (2^-23), so
 *    d_s <= (|ln base| 2/n_rot + 2) 2^-24;
 *  - theta_k takes k products by theta_scale: k (d_s + 2^-24);
 *  - (float)pos (exact below 2^24), / factor, * freq_scale: 3 2^-24.
 * |theta_k - exact| <= theta_k (k (d_s + 2^-24) + 3 2^-24), to first order
 * (we allow 1.5 times that). cosf/sinf add 1 ulp (2^-24 absolute for values
 * up to 1, doubled for margin), and each output's products and sum round
 * once more relative to |a| + |b|. */
static void rope_check_exact(const tensor_ops *t, int n_head, int head_dim, int n_rot, int64_t pos,
                             float base, float freq_scale, const float *ff, int mode)
{
    const int64_t n = (int64_t)n_head * head_dim;
    float *x = row_new(n), *y = row_new(n);
    rng_seed((uint64_t)(pos * 31 + n_rot + mode));
    fill(x, n, 2.0);
    memcpy(y, x, (size_t)n * sizeof(float));
    t->rope(y, n_head, head_dim, n_rot, pos, base, freq_scale, ff, mode);

    const int half = n_rot / 2;
    const double d_s = (fabs(log((double)base)) * 2.0 / n_rot + 2.0) * 0x1p-24;
    for (int h = 0; h < n_head; h++) {
        const float *xh = x + (int64_t)h * head_dim;
        const float *yh = y + (int64_t)h * head_dim;
        for (int k = 0; k < half; k++) {
            double theta = (double)pos * freq_scale * pow((double)base, -2.0 * k / n_rot) / (ff ? ff[k] : 1.0);
            double d_theta = 1.5 * fabs(theta) * (k * (d_s + 0x1p-24) + 3 * 0x1p-24);
            int i0 = mode == TENSOR_ROPE_NEOX ? k : 2 * k;
            int i1 = mode == TENSOR_ROPE_NEOX ? k + half : 2 * k + 1;
            double a = xh[i0], b = xh[i1];
            double tol = (fabs(a) + fabs(b)) * (d_theta + 2 * 0x1p-23 + 2 * 0x1p-24);
            char what[96];
            snprintf(what, sizeof what, "rope %s pos=%lld n_rot=%d head=%d",
                     mode == TENSOR_ROPE_NEOX ? "neox" : "normal", (long long)pos, n_rot, h);
            expect_close(what, t->name, n, i0, yh[i0], a * cos(theta) - b * sin(theta), tol);
            expect_close(what, t->name, n, i1, yh[i1], a * sin(theta) + b * cos(theta), tol);
        }
        /* Dims past n_rot are untouched. */
        for (int i = n_rot; i < head_dim; i++) assert_true(memcmp(&xh[i], &yh[i], sizeof(float)) == 0);
    }

    /* GGML's order, bit for bit. */
    memcpy(y, x, (size_t)n * sizeof(float));
    t->rope(y, n_head, head_dim, n_rot, pos, base, freq_scale, ff, mode);
    float *g = row_new(n);
    memcpy(g, x, (size_t)n * sizeof(float));
    rope_ggml(g, n_head, head_dim, n_rot, pos, base, freq_scale, ff, mode);
    if (!same_bits(g, y, n))
        fail_msg("rope[%s] mode %d pos %lld n_rot %d: differs from GGML's order", t->name, mode, (long long)pos, n_rot);
    free(g);
    free(x);
    free(y);
}

static void test_rope_matches_closed_form_and_ggml(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    /* Llama 3.1's rope factors have this shape: 1 for high frequencies, up
     * to 8 for the lowest. */
    float ff[256];
    for (int k = 0; k < 256; k++) ff[k] = 1.0f + 7.0f * (float)k / 255.0f;
    const int64_t positions[] = {0, 1, 2, 17, 511, 4095, 32767, 131071};
    for (int k = 0; k < n_var; k++) {
        for (int mode = 0; mode <= 2; mode += 2) {
            for (size_t p = 0; p < sizeof(positions) / sizeof(positions[0]); p++) {
                int64_t pos = positions[p];
                rope_check_exact(v[k], 4, 128, 128, pos, 10000.0f, 1.0f, NULL, mode);
                rope_check_exact(v[k], 3, 128, 128, pos, 500000.0f, 1.0f, ff, mode);
                rope_check_exact(v[k], 2, 64, 64, pos, 10000.0f, 0.25f, NULL, mode);
                rope_check_exact(v[k], 2, 96, 96, pos, 10000.0f, 1.0f / 3.0f, ff, mode);
                /* Partial rotation (n_rot < head_dim, as Phi and StableLM). */
                rope_check_exact(v[k], 3, 80, 32, pos, 10000.0f, 1.0f, NULL, mode);
                /* More pairs than one chunk, and pair counts that are not a
                 * multiple of the vector width. */
                rope_check_exact(v[k], 2, 260, 200, pos, 1e6f, 0.5f, ff, mode);
                rope_check_exact(v[k], 5, 14, 14, pos, 10000.0f, 1.0f, NULL, mode);
                rope_check_exact(v[k], 1, 6, 2, pos, 10000.0f, 1.0f, NULL, mode);
            }
        }
    }
}

static void test_rope_position_zero_is_identity_and_pairs_rotate(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    for (int k = 0; k < n_var; k++) {
        float x[2 * 16], y[2 * 16];
        rng_seed(9);
        fill(x, 32, 1.0);
        memcpy(y, x, sizeof y);
        v[k]->rope(y, 2, 16, 16, 0, 10000.0f, 1.0f, NULL, TENSOR_ROPE_NORMAL);
        for (int i = 0; i < 32; i++) assert_true(y[i] == x[i]);

        /* With base 1 every pair turns by pos radians: (1, 0) -> (cos, sin). A
         * wrong pairing (normal vs neox) moves the values to other dims. */
        for (int mode = 0; mode <= 2; mode += 2) {
            float z[8] = {0};
            int partner = mode == TENSOR_ROPE_NEOX ? 4 : 1;
            z[0] = 1.0f;
            v[k]->rope(z, 1, 8, 8, 1, 1.0f, 1.0f, NULL, mode);
            for (int i = 0; i < 8; i++) {
                float want = i == 0 ? cosf(1.0f) : i == partner ? sinf(1.0f) : 0.0f;
                if (fabsf(z[i] - want) > 1e-6f) fail_msg("rope[%s] mode %d dim %d: %g, want %g", v[k]->name, mode, i, z[i], want);
            }
        }
    }
}

/* --- variants agree; determinism; alignment; no stray writes --- */

enum { MAXN = 4099, PAD = 16 };

/* Runs one op of t on rows at float offset `off` into guarded buffers and
 * returns the output (n floats) in out. The buffers around the output are
 * filled with a sentinel that must survive. */
typedef enum { OP_EXP, OP_SILU, OP_GELU, OP_SWIGLU, OP_ADD, OP_MUL, OP_SCALE, OP_SOFTCAP, OP_RMSNORM, OP_RMSNORM_NOW, OP_SOFTMAX, OP_DOT, OP_COUNT } op_id;
static const char *const op_names[OP_COUNT] = {"exp", "silu", "gelu", "swiglu", "add", "mul", "scale", "softcap", "rmsnorm", "rmsnorm(w=NULL)", "softmax", "dot"};

static void run_op(const tensor_ops *t, op_id op, const float *a_src, const float *b_src, int64_t n, int off, float *out)
{
    static float abuf[MAXN + 2 * PAD], bbuf[MAXN + 2 * PAD], obuf[MAXN + 2 * PAD];
    const float sentinel = -7.25e11f;
    for (int i = 0; i < MAXN + 2 * PAD; i++) obuf[i] = sentinel;
    float *a = abuf + PAD + off, *b = bbuf + PAD + off, *o = obuf + PAD + off;
    memcpy(a, a_src, (size_t)n * sizeof(float));
    memcpy(b, b_src, (size_t)n * sizeof(float));
    switch (op) {
    case OP_EXP: t->exp(o, a, n); break;
    case OP_SILU: t->silu(o, a, n); break;
    case OP_GELU: t->gelu(o, a, n); break;
    case OP_SWIGLU: t->swiglu(o, a, b, n); break;
    case OP_ADD: t->add(o, a, b, n); break;
    case OP_MUL: t->mul(o, a, b, n); break;
    case OP_SCALE: memcpy(o, a, (size_t)n * sizeof(float)); t->scale(o, 1.7f, n); break;
    case OP_SOFTCAP: memcpy(o, a, (size_t)n * sizeof(float)); t->softcap(o, 5.0f, n); break;
    case OP_RMSNORM: t->rmsnorm(o, a, b, n, 1e-6f); break;
    case OP_RMSNORM_NOW: t->rmsnorm(o, a, NULL, n, 1e-6f); break;
    case OP_SOFTMAX: memcpy(o, a, (size_t)n * sizeof(float)); t->softmax(o, n); break;
    case OP_DOT: {
        float d = t->dot_f32(a, b, n);
        memcpy(out, &d, sizeof d);
        return;
    }
    default: fail();
    }
    for (int i = 0; i < PAD + off; i++) assert_true(obuf[i] == sentinel);
    for (int64_t i = PAD + off + n; i < MAXN + 2 * PAD; i++)
        if (obuf[i] != sentinel) fail_msg("%s[%s] n=%lld wrote past the end", op_names[op], t->name, (long long)n);
    memcpy(out, o, (size_t)n * sizeof(float));
}

static int op_is_elementwise(op_id op)
{
    return op <= OP_SOFTCAP;
}

static int op_is_bit_exact_across_variants(op_id op)
{
    return op == OP_ADD || op == OP_MUL || op == OP_SCALE || op == OP_RMSNORM || op == OP_RMSNORM_NOW || op == OP_DOT;
}

static void test_deterministic_whatever_the_alignment_and_length(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    static float a[MAXN], b[MAXN], base[MAXN], got[MAXN], full[MAXN];
    const int64_t big[] = {255, 1000, 4099};
    for (int k = 0; k < n_var; k++) {
        for (int op = 0; op < OP_COUNT; op++) {
            rng_seed(4000 + (uint64_t)op);
            fill(a, MAXN, 6.0);
            fill(b, MAXN, 2.0);
            /* The full-length result, for the "element i does not depend on
             * n" check of element-wise ops. */
            run_op(v[k], (op_id)op, a, b, 67, 0, full);
            for (int64_t n = 1; n <= 67 + 3; n++) {
                int64_t nn = n <= 67 ? n : big[n - 68];
                run_op(v[k], (op_id)op, a, b, nn, 0, base);
                int64_t n_out = op == OP_DOT ? 1 : nn;
                for (int off = 0; off < 8; off++) {
                    run_op(v[k], (op_id)op, a, b, nn, off, got);
                    if (!same_bits(base, got, n_out))
                        fail_msg("%s[%s] n=%lld: offset %d gives different bits", op_names[op], v[k]->name, (long long)nn, off);
                }
                if (op_is_elementwise((op_id)op) && nn <= 67 && !same_bits(base, full, nn))
                    fail_msg("%s[%s]: the first %lld results change with n", op_names[op], v[k]->name, (long long)nn);
            }
        }
    }
}

static void test_simd_variants_agree_with_scalar(void **state)
{
    (void)state;
    const tensor_ops *v[3];
    int n_var = variants(v);
    if (n_var == 1) {
        print_message("only the scalar variant runs on this CPU: nothing to compare\n");
        skip();
    }
    static float a[MAXN], b[MAXN], ref[MAXN], got[MAXN];
    for (int k = 1; k < n_var; k++) {
        for (int op = 0; op < OP_COUNT; op++) {
            for (int64_t n = 1; n <= MAXN; n = n < 67 ? n + 1 : n * 2 + 1) {
                int64_t nn = n > MAXN ? MAXN : n;
                rng_seed(5000 + (uint64_t)(op * 10000 + nn));
                fill(a, nn, 10.0);
                fill(b, nn, 2.0);
                run_op(v[0], (op_id)op, a, b, nn, 0, ref);
                run_op(v[k], (op_id)op, a, b, nn, 3, got);
                int64_t n_out = op == OP_DOT ? 1 : nn;
                if (op_is_bit_exact_across_variants((op_id)op)) {
                    if (!same_bits(ref, got, n_out))
                        fail_msg("%s[%s] n=%lld: not bit-identical to scalar", op_names[op], v[k]->name, (long long)nn);
                    continue;
                }
                /* Both are within their tolerance of the exact value, so
                 * within twice of each other (plus the absolute floors). */
                for (int64_t i = 0; i < n_out; i++) {
                    double r = ref[i], tol;
                    switch (op) {
                    case OP_EXP: tol = 2 * TENSOR_TOL_EXP_REL * fabs(r) + 2 * TENSOR_TOL_EXP_ABS; break;
                    case OP_SILU: tol = 2 * TENSOR_TOL_SILU_REL * fabs(r) + 2 * TENSOR_TOL_ACT_ABS; break;
                    case OP_SWIGLU: tol = 2 * TENSOR_TOL_SWIGLU_REL * fabs(r) + 2 * TENSOR_TOL_ACT_ABS; break;
                    case OP_GELU: tol = 2 * TENSOR_TOL_GELU_REL * (1 + fabs(ref_gelu_y2(a[i]))) * fabs(r) + 2 * TENSOR_TOL_ACT_ABS; break;
                    case OP_SOFTCAP: tol = 2 * TENSOR_TOL_SOFTCAP_ABS * 5.0; break;
                    default: { /* softmax */
                        double max = -INFINITY;
                        for (int64_t j = 0; j < nn; j++) max = a[j] > max ? a[j] : max;
                        tol = 2 * TENSOR_TOL_SOFTMAX_REL * (1 + fabs(a[i] - max)) * fabs(r) + 2 * TENSOR_TOL_SOFTMAX_ABS;
                    }
                    }
                    expect_close(op_names[op], v[k]->name, nn, i, got[i], r, tol);
                }
            }
        }
        /* rope: bit-identical too. */
        float x[5 * 96], y[5 * 96];
        for (int mode = 0; mode <= 2; mode += 2) {
            rng_seed(6000 + (uint64_t)mode);
            fill(x, 5 * 96, 3.0);
            memcpy(y, x, sizeof y);
            v[0]->rope(x, 5, 96, 90, 1234, 10000.0f, 1.0f, NULL, mode);
            v[k]->rope(y, 5, 96, 90, 1234, 10000.0f, 1.0f, NULL, mode);
            assert_true(same_bits(x, y, 5 * 96));
        }
    }
}

static void test_active_table_follows_the_cpu_level(void **state)
{
    (void)state;
    const tensor_ops *t = tensor_ops_active();
    assert_non_null(t);
    assert_true(t->level <= strata_cpu_level());
    assert_ptr_equal(tensor_ops_for_level(STRATA_SIMD_SCALAR), tensor_ops_for_level(STRATA_SIMD_SCALAR));
    if (strata_cpu_level() >= STRATA_SIMD_AVX2) assert_int_equal(t->level, STRATA_SIMD_AVX2);
    else assert_int_equal(t->level, STRATA_SIMD_SCALAR);
    /* Levels above what the CPU has give no table. */
    if (strata_cpu_level_max(strata_cpu_get()) < STRATA_SIMD_AVX512)
        assert_null(tensor_ops_for_level(STRATA_SIMD_AVX512));

    /* The public functions are the active table's. */
    float a[37], b[37], y1[37], y2[37];
    rng_seed(7);
    fill(a, 37, 3.0);
    fill(b, 37, 3.0);
    tensor_silu(y1, a, 37);
    t->silu(y2, a, 37);
    assert_true(same_bits(y1, y2, 37));
    tensor_gelu(y1, a, 37);
    t->gelu(y2, a, 37);
    assert_true(same_bits(y1, y2, 37));
    tensor_exp(y1, a, 37);
    t->exp(y2, a, 37);
    assert_true(same_bits(y1, y2, 37));
    tensor_swiglu(y1, a, b, 37);
    t->swiglu(y2, a, b, 37);
    assert_true(same_bits(y1, y2, 37));
    tensor_rmsnorm(y1, a, b, 37, 1e-5f);
    t->rmsnorm(y2, a, b, 37, 1e-5f);
    assert_true(same_bits(y1, y2, 37));
    memcpy(y1, a, sizeof a);
    memcpy(y2, a, sizeof a);
    tensor_softmax(y1, 37);
    t->softmax(y2, 37);
    assert_true(same_bits(y1, y2, 37));
    tensor_rope(y1, 1, 36, 36, 99, 10000.0f, 1.0f, NULL, TENSOR_ROPE_NEOX);
    t->rope(y2, 1, 36, 36, 99, 10000.0f, 1.0f, NULL, TENSOR_ROPE_NEOX);
    assert_true(same_bits(y1, y2, 37));
    tensor_add(y1, a, b, 37);
    assert_true(y1[36] == a[36] + b[36]);
    tensor_mul(y1, a, b, 37);
    assert_true(y1[36] == a[36] * b[36]);
    memcpy(y1, a, sizeof a);
    tensor_scale(y1, 2.0f, 37);
    assert_true(y1[36] == a[36] * 2.0f);
    float d1 = tensor_dot_f32(a, b, 37), d2 = t->dot_f32(a, b, 37);
    assert_true(memcmp(&d1, &d2, sizeof d1) == 0);
}

int main(void)
{
    char cpu[256];
    print_message("cpu: %s; ops table: %s\n", strata_cpu_describe(cpu, sizeof cpu), tensor_ops_active()->name);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy_over_a_sweep_of_floats),
        cmocka_unit_test(test_silu_gelu_swiglu_match_the_exact_functions),
        cmocka_unit_test(test_softcap_matches_tanh),
        cmocka_unit_test(test_rmsnorm_matches_double_reference),
        cmocka_unit_test(test_softmax_stable_and_normalised),
        cmocka_unit_test(test_add_mul_scale_are_exact),
        cmocka_unit_test(test_dot_within_bound_and_exact_on_integers),
        cmocka_unit_test(test_dot_follows_the_documented_order),
        cmocka_unit_test(test_rope_matches_closed_form_and_ggml),
        cmocka_unit_test(test_rope_position_zero_is_identity_and_pairs_rotate),
        cmocka_unit_test(test_deterministic_whatever_the_alignment_and_length),
        cmocka_unit_test(test_simd_variants_agree_with_scalar),
        cmocka_unit_test(test_active_table_follows_the_cpu_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
