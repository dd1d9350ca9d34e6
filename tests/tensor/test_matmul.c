/* tensor_matmul and its kernels.
 *
 *  (a) Every SIMD kernel (vec_dot, the decode tile, the prefill tile) of
 *      every level this CPU can run against the scalar reference, on
 *      quantized random weights and on adversarial blocks (all zeros, all
 *      code bits set, codes 0x80, the largest and smallest finite f16
 *      scales), within VEC_DOT_REL_TOL of the sum of |terms|; and each
 *      level's tiles against its own vec_dot bit for bit.
 *  (b) tensor_matmul against a double-precision product of the dequantized
 *      weights and the quantized-then-dequantized activations (tight), and
 *      against the plain float product of the unquantized data (a per-type
 *      bound on the quantization error).
 *  (c) Batch invariance: a row x token result is bit-identical inside
 *      batches of 1, 3, 7, 16 and 33 tokens with different neighbours, with
 *      1 and 2 threads, at every level.
 *  (d) Odd shapes: 1, 3 and 17 rows; one block and many blocks; float
 *      types with column counts that are not a multiple of 8.
 *  Plus the API's errors and the scratch size.
 *
 * AVX-512 kernels are tested only on a CPU that has AVX-512 VNNI; elsewhere
 * the test says it skipped them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "base/err.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/matmul.h"
#include "tensor/matmul_kernels.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sanitized.h"

/* Integer partial sums are exact, so SIMD and scalar differ only by float
 * rounding in the scale products and the accumulation: a few ulps of the
 * sum of |w_i x_i| for the sizes here (<= 64 blocks, or 2048 floats in 8
 * lanes). */
#define VEC_DOT_REL_TOL 1e-5

/* tensor_matmul against the exact (double) product of what the kernels
 * actually multiply: the same rounding budget. */
#define MATMUL_REL_TOL 1e-5

static const uint32_t k_types[] = {
    STRATA_TYPE_F32,  STRATA_TYPE_F16,  STRATA_TYPE_BF16, STRATA_TYPE_Q4_0,   STRATA_TYPE_Q4_1,
    STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q2_K,   STRATA_TYPE_Q3_K,
    STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K, STRATA_TYPE_IQ4_NL, STRATA_TYPE_IQ4_XS,
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* Loose bound on the relative RMS error of y against the float product of
 * the unquantized weights and activations, for Gaussian data: the
 * quantization error of weights and activations together. Each is about
 * 1.5x the worst value measured on this data (MM_TEST_VERBOSE=1 prints
 * them); a wrong bit layout or scale gives errors near 1. */
static double plain_bound(uint32_t t)
{
    switch (t) {
    case STRATA_TYPE_F32: return 1e-6;
    case STRATA_TYPE_F16: return 5e-4;
    case STRATA_TYPE_BF16: return 4e-3;
    case STRATA_TYPE_Q8_0: return 0.02;
    case STRATA_TYPE_Q6_K: return 0.03;
    case STRATA_TYPE_Q5_0: case STRATA_TYPE_Q5_1: case STRATA_TYPE_Q5_K: return 0.08;
    case STRATA_TYPE_Q4_0: case STRATA_TYPE_Q4_1: case STRATA_TYPE_Q4_K:
    case STRATA_TYPE_IQ4_NL: case STRATA_TYPE_IQ4_XS: return 0.15;
    case STRATA_TYPE_Q3_K: return 0.40;
    case STRATA_TYPE_Q2_K: return 0.45;
    default: return 0;
    }
}

static bool is_float_type(uint32_t t)
{
    return t == STRATA_TYPE_F32 || t == STRATA_TYPE_F16 || t == STRATA_TYPE_BF16;
}

static int64_t block_elems(uint32_t t)
{
    return strata_type_get(t)->block_elems;
}

/* Column count of `blocks` blocks (for float types, 32 * blocks). */
static int64_t cols_of(uint32_t t, int64_t blocks)
{
    return is_float_type(t) ? 32 * blocks : block_elems(t) * blocks;
}

static enum strata_simd_level max_level(void)
{
    return strata_cpu_level_max(strata_cpu_get());
}

/* --- data --- */

static void fill_normal(strata_rng *rng, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * (float)strata_rng_normal(rng);
}

/* n_rows rows of random Gaussian weights, quantized; *wf gets the floats
 * before quantization (malloc'd) when wf is not NULL. */
static void *make_weights(uint32_t t, int64_t n_rows, int64_t n_cols, uint64_t seed, float **wf)
{
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    size_t rb = strata_type_row_bytes(t, n_cols);
    float *f = malloc((size_t)(n_rows * n_cols) * sizeof(float));
    void *w = malloc(rb * (size_t)n_rows);
    assert_non_null(f);
    assert_non_null(w);
    fill_normal(&rng, f, n_rows * n_cols, 0.05f);
    for (int64_t r = 0; r < n_rows; r++)
        assert_int_equal(tensor_quantize_row(t, f + r * n_cols, (char *)w + r * rb, n_cols), 0);
    if (wf)
        *wf = f;
    else
        free(f);
    return w;
}

/* The f16 scale fields of one block of a quantized type: d and, where the
 * type has one, its min/offset (dmin, m). */
static void block_scale_fields(uint32_t t, void *blk, uint16_t **d, uint16_t **m)
{
    *d = NULL;
    *m = NULL;
    switch (t) {
    case STRATA_TYPE_Q4_0: *d = &((block_q4_0 *)blk)->d; break;
    case STRATA_TYPE_Q5_0: *d = &((block_q5_0 *)blk)->d; break;
    case STRATA_TYPE_Q8_0: *d = &((block_q8_0 *)blk)->d; break;
    case STRATA_TYPE_IQ4_NL: *d = &((block_iq4_nl *)blk)->d; break;
    case STRATA_TYPE_Q4_1: *d = &((block_q4_1 *)blk)->d, *m = &((block_q4_1 *)blk)->m; break;
    case STRATA_TYPE_Q5_1: *d = &((block_q5_1 *)blk)->d, *m = &((block_q5_1 *)blk)->m; break;
    case STRATA_TYPE_Q2_K: *d = &((block_q2_k *)blk)->d, *m = &((block_q2_k *)blk)->dmin; break;
    case STRATA_TYPE_Q4_K: *d = &((block_q4_k *)blk)->d, *m = &((block_q4_k *)blk)->dmin; break;
    case STRATA_TYPE_Q5_K: *d = &((block_q5_k *)blk)->d, *m = &((block_q5_k *)blk)->dmin; break;
    case STRATA_TYPE_Q3_K: *d = &((block_q3_k *)blk)->d; break;
    case STRATA_TYPE_Q6_K: *d = &((block_q6_k *)blk)->d; break;
    case STRATA_TYPE_IQ4_XS: *d = &((block_iq4_xs *)blk)->d; break;
    default: break;
    }
}

enum adv_mode {
    ADV_ZERO,      /* every byte 0 */
    ADV_ONES,      /* every code bit set, largest finite scales */
    ADV_80,        /* every byte 0x80 (Q8_0: -128; Q6_K: scale -128), largest scales */
    ADV_BYTES,     /* random bytes, random moderate scales */
    ADV_TINY,      /* random bytes, the smallest subnormal scales */
    ADV_COUNT
};
static const char *const k_adv_names[] = {"zeros", "all-ones", "0x80", "random-bytes", "tiny"};

/* One row of adversarial weights, written at byte level. Float types get
 * finite values: large magnitudes, or zeros. */
static void make_adv_row(uint32_t t, enum adv_mode mode, int64_t n_cols, void *row,
                         strata_rng *rng)
{
    size_t rb = strata_type_row_bytes(t, n_cols);
    uint8_t *p = row;
    if (is_float_type(t)) {
        for (int64_t i = 0; i < n_cols; i++) {
            float v = 0.0f;
            if (mode == ADV_ONES || mode == ADV_80)
                v = (strata_rng_next(rng) & 1 ? 1.0f : -1.0f) *
                    (t == STRATA_TYPE_F16 ? 65504.0f : 1e30f);
            else if (mode == ADV_BYTES)
                v = (float)strata_rng_normal(rng) *
                    ldexpf(1.0f, t == STRATA_TYPE_F16 ? (int)(strata_rng_next(rng) % 20) - 10
                                                      : (int)(strata_rng_next(rng) % 40) - 20);
            else if (mode == ADV_TINY)
                v = (t == STRATA_TYPE_F16 ? 0x1p-24f : 1e-38f) * (float)(strata_rng_next(rng) % 5);
            if (t == STRATA_TYPE_F32) memcpy(p + 4 * i, &v, 4);
            else {
                uint16_t h = t == STRATA_TYPE_F16 ? tensor_f32_to_f16(v) : tensor_f32_to_bf16(v);
                memcpy(p + 2 * i, &h, 2);
            }
        }
        return;
    }
    for (size_t i = 0; i < rb; i++)
        p[i] = mode == ADV_ZERO ? 0 : mode == ADV_ONES ? 0xff : mode == ADV_80 ? 0x80
                                                           : (uint8_t)strata_rng_next(rng);
    if (mode == ADV_ZERO) return;
    size_t bb = strata_type_get(t)->block_bytes;
    for (size_t b = 0; b < rb / bb; b++) {
        uint16_t *d, *m;
        block_scale_fields(t, p + b * bb, &d, &m);
        uint16_t vd, vm;
        if (mode == ADV_ONES || mode == ADV_80) {
            vd = tensor_f32_to_f16(65504.0f);
            vm = tensor_f32_to_f16(mode == ADV_ONES ? 65504.0f : -65504.0f);
        } else if (mode == ADV_TINY) {
            vd = 0x0001; /* 2^-24 */
            vm = 0x8001;
        } else {
            vd = tensor_f32_to_f16((float)strata_rng_normal(rng));
            vm = tensor_f32_to_f16((float)strata_rng_normal(rng));
        }
        *d = vd;
        if (m) *m = vm;
    }
}

/* Activations as the kernels read them: quantized to the vec_dot_type
 * (or the floats themselves), n_tok rows; returns the row stride. */
static size_t prep_acts(uint32_t t, const float *x, int64_t n_tok, int64_t n_cols, void **xq)
{
    int vdt = tensor_matmul_vec_dot_type(t);
    assert_true(vdt >= 0);
    size_t xrb = strata_type_row_bytes((uint32_t)vdt, n_cols);
    *xq = malloc(xrb * (size_t)n_tok);
    assert_non_null(*xq);
    for (int64_t i = 0; i < n_tok; i++)
        assert_int_equal(tensor_quantize_row((uint32_t)vdt, x + i * n_cols, (char *)*xq + i * xrb, n_cols), 0);
    return xrb;
}

/* Activation rows of different kinds: Gaussian; alternating +-1 (every
 * code at +-127); large; a row with a zero block. */
static void make_acts(strata_rng *rng, float *x, int64_t n_tok, int64_t n_cols)
{
    for (int64_t i = 0; i < n_tok; i++) {
        float *xi = x + i * n_cols;
        switch (i % 4) {
        case 0: fill_normal(rng, xi, n_cols, 1.0f); break;
        case 1:
            for (int64_t c = 0; c < n_cols; c++)
                xi[c] = strata_rng_next(rng) & 1 ? 1.0f : -1.0f;
            break;
        case 2: fill_normal(rng, xi, n_cols, 1000.0f); break;
        default:
            fill_normal(rng, xi, n_cols, 0.1f);
            for (int64_t c = 0; c < n_cols && c < 32; c++)
                xi[c] = 0.0f;
            break;
        }
    }
}

/* sum_i |w_i x_i| in double, from the decoded rows. */
static double sum_abs_terms(uint32_t t, const void *wrow, const void *xrow, int64_t n)
{
    float *wd = malloc((size_t)n * sizeof(float)), *xd = malloc((size_t)n * sizeof(float));
    assert_non_null(wd);
    assert_non_null(xd);
    assert_int_equal(tensor_dequantize_row(t, wrow, wd, n), 0);
    assert_int_equal(tensor_dequantize_row((uint32_t)tensor_matmul_vec_dot_type(t), xrow, xd, n), 0);
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fabs((double)wd[i] * (double)xd[i]);
    free(wd);
    free(xd);
    return s;
}

/* Q8_1 stores s = d * sum(q) rounded to f16, and the Q4_1/Q5_1 kernels
 * use that s for the offset term m * sum(x): the exact value of what they
 * compute is the plain dot product plus sum_b m_b * (s_b - d_b sum q_b). */
static double q8_1_offset_correction(uint32_t t, const void *wrow, const void *xrow, int64_t n)
{
    if (t != STRATA_TYPE_Q4_1 && t != STRATA_TYPE_Q5_1) return 0;
    const block_q8_1 *xb = xrow;
    double c = 0;
    for (int64_t b = 0; b < n / TENSOR_QK; b++) {
        uint16_t m = t == STRATA_TYPE_Q4_1 ? ((const block_q4_1 *)wrow)[b].m
                                           : ((const block_q5_1 *)wrow)[b].m;
        int sum = 0;
        for (int j = 0; j < TENSOR_QK; j++)
            sum += xb[b].qs[j];
        c += (double)tensor_f16_to_f32(m) *
             ((double)tensor_f16_to_f32(xb[b].s) - (double)tensor_f16_to_f32(xb[b].d) * sum);
    }
    return c;
}

static bool same_bits(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* --- (a) kernels against the scalar reference --- */

/* Checks every kernel of set k on weights w (4 rows at least) and
 * activations xq (4 tokens at least) against the scalar vec_dot. */
static void check_kernel_set(uint32_t t, const tensor_mm_kernels *k, const char *what,
                             const void *w, size_t wrb, const void *xq, size_t xrb, int64_t n)
{
    const tensor_mm_kernels *ref = tensor_mm_kernels_exact(t, STRATA_SIMD_SCALAR);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 4; i++) {
            const void *wr = (const char *)w + r * wrb, *xi = (const char *)xq + i * xrb;
            float want = ref->vec_dot(n, wr, xi);
            float got = k->vec_dot(n, wr, xi);
            double tol = VEC_DOT_REL_TOL * sum_abs_terms(t, wr, xi, n) + 1e-30;
            if (!(fabs((double)got - (double)want) <= tol) || !isfinite(got))
                fail_msg("%s %s n=%lld row %d tok %d: %s gives %.9g, scalar %.9g (tol %.3g)",
                         strata_type_name(t), what, (long long)n, r, i, k->name, got, want, tol);
        }
    /* tiles: bit-identical to this set's own vec_dot */
    if (k->tile_rows) {
        float yr[8];
        k->tile_rows(n, w, wrb, xq, xrb, yr, 1);
        for (int r = 0; r < k->rows_r; r++) {
            float one = k->vec_dot(n, (const char *)w + r * wrb, xq);
            if (!same_bits(yr[r], one))
                fail_msg("%s %s: %s tile_rows row %d gives %.9g, vec_dot %.9g", strata_type_name(t),
                         what, k->name, r, yr[r], one);
        }
    }
    if (k->tile) {
        float yt[64];
        const size_t ys = 8;
        k->tile(n, w, wrb, xq, xrb, yt, ys);
        for (int r = 0; r < k->tile_r; r++)
            for (int i = 0; i < k->tile_t; i++) {
                float one = k->vec_dot(n, (const char *)w + r * wrb, (const char *)xq + i * xrb);
                if (!same_bits(yt[i * ys + r], one))
                    fail_msg("%s %s: %s tile (%d,%d) gives %.9g, vec_dot %.9g", strata_type_name(t),
                             what, k->name, r, i, yt[i * ys + r], one);
            }
    }
}

/* The levels above scalar this CPU can run that define kernels of their
 * own for t. Prints, once per level, when a level is skipped. */
static int simd_levels(uint32_t t, enum strata_simd_level *out)
{
    static bool told;
    int n = 0;
    for (int l = STRATA_SIMD_AVX2; l <= STRATA_SIMD_AVX512; l++) {
        if (tensor_mm_kernels_exact(t, (enum strata_simd_level)l) == NULL) continue;
        if ((int)max_level() < l) {
            if (!told)
                print_message("[  SKIP    ] %s kernels: this CPU lacks them\n",
                              strata_simd_level_name((enum strata_simd_level)l));
            continue;
        }
        out[n++] = (enum strata_simd_level)l;
    }
    if (n < 2 && (int)max_level() < STRATA_SIMD_AVX512) told = true;
    return n;
}

static void test_kernels_vs_scalar(void **state)
{
    (void)state;
    int n_checked = 0;
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = k_types[ti];
        enum strata_simd_level lv[3];
        int n_lv = simd_levels(t, lv);
        const int64_t blocks_list[] = {1, 3, is_float_type(t) ? 64 : (block_elems(t) == 256 ? 8 : 64)};
        for (size_t bi = 0; bi < 3; bi++) {
            int64_t n = cols_of(t, blocks_list[bi]);
            if (is_float_type(t) && bi == 1) n = 3 * 32 + 5; /* a tail of 5 */
            const int n_rows = 4, n_tok = 4;
            size_t wrb = strata_type_row_bytes(t, n);
            strata_rng rng;
            strata_rng_seed(&rng, 1000 + ti * 7 + bi);
            float *x = malloc((size_t)(n_tok * n) * sizeof(float));
            assert_non_null(x);
            make_acts(&rng, x, n_tok, n);
            void *xq;
            size_t xrb = prep_acts(t, x, n_tok, n, &xq);

            /* quantized Gaussian weights, then each adversarial kind */
            for (int mode = -1; mode < ADV_COUNT; mode++) {
                void *w;
                if (mode < 0) {
                    w = make_weights(t, n_rows, n, 77 + bi, NULL);
                } else {
                    w = malloc(wrb * n_rows);
                    assert_non_null(w);
                    for (int r = 0; r < n_rows; r++)
                        make_adv_row(t, (enum adv_mode)mode, n, (char *)w + r * wrb, &rng);
                }
                const char *what = mode < 0 ? "quantized" : k_adv_names[mode];
                check_kernel_set(t, tensor_mm_kernels_exact(t, STRATA_SIMD_SCALAR), what, w, wrb,
                                 xq, xrb, n);
                for (int l = 0; l < n_lv; l++) {
                    check_kernel_set(t, tensor_mm_kernels_exact(t, lv[l]), what, w, wrb, xq, xrb, n);
                    n_checked++;
                }
                if (mode == ADV_ZERO) {
                    /* zero weights give exactly zero everywhere */
                    for (int l = 0; l < n_lv; l++)
                        assert_true(tensor_mm_kernels_exact(t, lv[l])->vec_dot(n, w, xq) == 0.0f);
                }
                free(w);
            }
            free(xq);
            free(x);
        }
    }
    if (max_level() >= STRATA_SIMD_AVX2) assert_true(n_checked > 0);
}

/* --- (b) tensor_matmul against references --- */

/* y = x W^T at `level`, with a fresh scratch. Returns the rc. */
static int run_matmul(strata_pool *pool, enum strata_simd_level level, uint32_t t, const void *w,
                      int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok, float *y)
{
    size_t sb = tensor_matmul_scratch_bytes(t, n_cols, n_tok);
    void *scratch = sb ? malloc(sb) : NULL;
    if (sb) assert_non_null(scratch);
    int rc = tensor_matmul_at_level(pool, level, t, w, n_rows, n_cols, x, n_tok, y, scratch);
    free(scratch);
    return rc;
}

static void check_against_references(strata_pool *pool, enum strata_simd_level level, uint32_t t,
                                     int64_t n_rows, int64_t n_cols, int64_t n_tok, uint64_t seed)
{
    float *wf;
    void *w = make_weights(t, n_rows, n_cols, seed, &wf);
    strata_rng rng;
    strata_rng_seed(&rng, seed ^ 0x5eed);
    float *x = malloc((size_t)(n_tok * n_cols) * sizeof(float));
    float *y = malloc((size_t)(n_tok * n_rows) * sizeof(float));
    float *wd = malloc((size_t)(n_rows * n_cols) * sizeof(float));
    float *xd = malloc((size_t)(n_tok * n_cols) * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(wd);
    assert_non_null(xd);
    fill_normal(&rng, x, n_tok * n_cols, 1.0f);
    assert_int_equal(run_matmul(pool, level, t, w, n_rows, n_cols, x, n_tok, y), 0);

    size_t wrb = strata_type_row_bytes(t, n_cols);
    for (int64_t r = 0; r < n_rows; r++)
        assert_int_equal(tensor_dequantize_row(t, (char *)w + r * wrb, wd + r * n_cols, n_cols), 0);
    void *xq = NULL;
    size_t xrb = 0;
    if (is_float_type(t)) {
        memcpy(xd, x, (size_t)(n_tok * n_cols) * sizeof(float));
    } else {
        xrb = prep_acts(t, x, n_tok, n_cols, &xq);
        int vdt = tensor_matmul_vec_dot_type(t);
        for (int64_t i = 0; i < n_tok; i++)
            assert_int_equal(tensor_dequantize_row((uint32_t)vdt, (char *)xq + i * xrb, xd + i * n_cols, n_cols), 0);
    }
    double se = 0, sr = 0;
    for (int64_t i = 0; i < n_tok; i++)
        for (int64_t r = 0; r < n_rows; r++) {
            double exact = 0, mag = 0, plain = 0;
            for (int64_t c = 0; c < n_cols; c++) {
                double p = (double)wd[r * n_cols + c] * (double)xd[i * n_cols + c];
                exact += p;
                mag += fabs(p);
                plain += (double)wf[r * n_cols + c] * (double)x[i * n_cols + c];
            }
            if (xq != NULL)
                exact += q8_1_offset_correction(t, (char *)w + r * wrb, (char *)xq + i * xrb, n_cols);
            double got = y[i * n_rows + r];
            if (!(fabs(got - exact) <= MATMUL_REL_TOL * mag + 1e-30))
                fail_msg("%s/%s %lldx%lld, %lld tokens: y[%lld][%lld] = %.9g, exact %.9g (sum|terms| %.3g)",
                         strata_type_name(t), strata_simd_level_name(level), (long long)n_rows,
                         (long long)n_cols, (long long)n_tok, (long long)i, (long long)r, got, exact, mag);
            se += (got - plain) * (got - plain);
            sr += plain * plain;
        }
    double rel = sqrt(se / sr);
    if (getenv("MM_TEST_VERBOSE"))
        print_message("%s/%s %lldx%lld x %lld: rel RMS vs float product %.4g\n", strata_type_name(t),
                      strata_simd_level_name(level), (long long)n_rows, (long long)n_cols,
                      (long long)n_tok, rel);
    /* a statistical bound: only over enough outputs and terms to mean it */
    if (n_rows * n_tok >= 9 && n_cols >= 128 && !(rel <= plain_bound(t)))
        fail_msg("%s/%s %lldx%lld: relative RMS error against the float product %.4g > bound %.4g",
                 strata_type_name(t), strata_simd_level_name(level), (long long)n_rows,
                 (long long)n_cols, rel, plain_bound(t));
    free(xq);
    free(w);
    free(wf);
    free(x);
    free(y);
    free(wd);
    free(xd);
}

static void all_levels(enum strata_simd_level *lv, int *n)
{
    *n = 0;
    for (int l = STRATA_SIMD_SCALAR; l <= (int)max_level(); l++)
        lv[(*n)++] = (enum strata_simd_level)l;
}

static void test_matmul_vs_reference(void **state)
{
    (void)state;
    strata_pool *pool = strata_pool_new(2);
    assert_non_null(pool);
    enum strata_simd_level lv[3];
    int n_lv;
    all_levels(lv, &n_lv);
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = k_types[ti];
        int64_t many = block_elems(t) == 256 ? 4 : 16;
        for (int l = 0; l < n_lv; l++) {
            /* (d) odd shapes, decode and prefill */
            check_against_references(pool, lv[l], t, 1, cols_of(t, 1), 1, 11 + ti);
            check_against_references(pool, lv[l], t, 3, cols_of(t, many), 5, 12 + ti);
            check_against_references(pool, lv[l], t, 17, cols_of(t, many), 9, 13 + ti);
            check_against_references(pool, lv[l], t, 17, cols_of(t, 1), 1, 14 + ti);
            if (is_float_type(t)) {
                check_against_references(pool, lv[l], t, 5, 1, 3, 15 + ti);
                check_against_references(pool, lv[l], t, 6, 13, 6, 16 + ti);
                check_against_references(pool, lv[l], t, 9, 100, 5, 17 + ti);
            }
        }
    }
    strata_pool_free(pool);
}

/* --- (c) batch invariance --- */

static void test_batch_invariance(void **state)
{
    (void)state;
    strata_pool *pools[2] = {NULL, strata_pool_new(2)};
    assert_non_null(pools[1]);
    enum strata_simd_level lv[3];
    int n_lv;
    all_levels(lv, &n_lv);
    const int64_t n_rows = 37, max_tok = 33;
    const int64_t batches[] = {1, 3, 7, 16, 33};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = k_types[ti];
        int64_t n_cols = cols_of(t, block_elems(t) == 256 ? 2 : 8);
        void *w = make_weights(t, n_rows, n_cols, 500 + ti, NULL);
        strata_rng rng;
        strata_rng_seed(&rng, 600 + ti);
        /* a pool of 2 * max_tok distinct token rows to draw batches from */
        const int64_t n_src = 2 * max_tok;
        float *src = malloc((size_t)(n_src * n_cols) * sizeof(float));
        float *x = malloc((size_t)(max_tok * n_cols) * sizeof(float));
        float *ref = malloc((size_t)(n_src * n_rows) * sizeof(float));
        float *y = malloc((size_t)(max_tok * n_rows) * sizeof(float));
        assert_non_null(src);
        assert_non_null(x);
        assert_non_null(ref);
        assert_non_null(y);
        make_acts(&rng, src, n_src, n_cols);
        for (int l = 0; l < n_lv; l++) {
            /* reference: each source token alone (decode path), one thread */
            for (int64_t s = 0; s < n_src; s++)
                assert_int_equal(run_matmul(NULL, lv[l], t, w, n_rows, n_cols, src + s * n_cols, 1,
                                            ref + s * n_rows), 0);
            for (int p = 0; p < 2; p++)
                for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                    int64_t nb = batches[bi];
                    int64_t pick[33];
                    for (int64_t i = 0; i < nb; i++) {
                        pick[i] = (int64_t)(strata_rng_next(&rng) % (uint64_t)n_src);
                        memcpy(x + i * n_cols, src + pick[i] * n_cols, (size_t)n_cols * sizeof(float));
                    }
                    assert_int_equal(run_matmul(pools[p], lv[l], t, w, n_rows, n_cols, x, nb, y), 0);
                    for (int64_t i = 0; i < nb; i++)
                        for (int64_t r = 0; r < n_rows; r++)
                            if (!same_bits(y[i * n_rows + r], ref[pick[i] * n_rows + r]))
                                fail_msg("%s/%s: token %lld row %lld differs in a batch of %lld with "
                                         "%d thread(s): %.9g vs %.9g alone",
                                         strata_type_name(t), strata_simd_level_name(lv[l]),
                                         (long long)i, (long long)r, (long long)nb, p + 1,
                                         y[i * n_rows + r], ref[pick[i] * n_rows + r]);
                }
        }
        free(w);
        free(src);
        free(x);
        free(ref);
        free(y);
    }
    strata_pool_free(pools[1]);
}

/* tensor_matmul (the process's level) agrees bit for bit with the same
 * level asked for explicitly. */
static void test_default_level(void **state)
{
    (void)state;
    const uint32_t t = STRATA_TYPE_Q4_K;
    const int64_t n_rows = 8, n_cols = 512, n_tok = 5;
    void *w = make_weights(t, n_rows, n_cols, 9, NULL);
    float x[5 * 512], y0[40], y1[40];
    strata_rng rng;
    strata_rng_seed(&rng, 10);
    fill_normal(&rng, x, n_tok * n_cols, 1.0f);
    void *scratch = malloc(tensor_matmul_scratch_bytes(t, n_cols, n_tok));
    assert_non_null(scratch);
    assert_int_equal(tensor_matmul(NULL, t, w, n_rows, n_cols, x, n_tok, y0, scratch), 0);
    assert_int_equal(run_matmul(NULL, strata_cpu_level(), t, w, n_rows, n_cols, x, n_tok, y1), 0);
    assert_memory_equal(y0, y1, sizeof y0);
    free(scratch);
    free(w);
}

static void test_api_errors(void **state)
{
    (void)state;
    float x[64] = {0}, y[4];
    char scratch[4096];
    char w[4096] = {0};
    /* types without kernels */
    assert_false(tensor_matmul_supported(STRATA_TYPE_Q8_K));
    assert_false(tensor_matmul_supported(STRATA_TYPE_Q4_0_4_4));
    assert_false(tensor_matmul_supported(STRATA_TYPE_COUNT));
    assert_int_equal(tensor_matmul_vec_dot_type(STRATA_TYPE_I32), -1);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0_4_4, w, 1, 256, x, 1, y, scratch),
                     STRATA_EUNSUPPORTED);
    assert_int_equal(tensor_matmul(NULL, 9999, w, 1, 32, x, 1, y, scratch), STRATA_EUNSUPPORTED);
    /* n_cols not a whole number of blocks */
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0, w, 1, 48, x, 1, y, scratch), STRATA_EINVAL);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_K, w, 1, 64, x, 1, y, scratch), STRATA_EINVAL);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_F32, w, 1, 0, x, 1, y, NULL), STRATA_EINVAL);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_F32, w, -1, 4, x, 1, y, NULL), STRATA_EINVAL);
    /* missing scratch or pointers */
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0, w, 1, 32, x, 1, y, NULL), STRATA_EINVAL);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0, NULL, 1, 32, x, 1, y, scratch), STRATA_EINVAL);
    /* empty products succeed and write nothing */
    y[0] = 42.0f;
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0, w, 0, 32, x, 1, y, NULL), 0);
    assert_int_equal(tensor_matmul(NULL, STRATA_TYPE_Q4_0, w, 1, 32, x, 0, y, NULL), 0);
    assert_true(y[0] == 42.0f);
    /* scratch sizes */
    assert_int_equal(tensor_matmul_scratch_bytes(STRATA_TYPE_F16, 4096, 8), 0);
    assert_int_equal(tensor_matmul_scratch_bytes(STRATA_TYPE_Q4_0, 4096, 3), 3 * 128 * 34);
    assert_int_equal(tensor_matmul_scratch_bytes(STRATA_TYPE_Q4_1, 64, 1), 2 * 36);
    assert_int_equal(tensor_matmul_scratch_bytes(STRATA_TYPE_Q6_K, 512, 2), 2 * 2 * 292);
    assert_int_equal(tensor_matmul_scratch_bytes(STRATA_TYPE_Q6_K, 100, 2), 0);
    assert_int_equal(tensor_matmul_vec_dot_type(STRATA_TYPE_IQ4_XS), STRATA_TYPE_Q8_K);
    assert_int_equal(tensor_matmul_vec_dot_type(STRATA_TYPE_IQ4_NL), STRATA_TYPE_Q8_0);
    assert_int_equal(tensor_matmul_vec_dot_type(STRATA_TYPE_Q5_1), STRATA_TYPE_Q8_1);
    assert_int_equal(tensor_matmul_vec_dot_type(STRATA_TYPE_BF16), STRATA_TYPE_F32);
    /* a zero matrix gives zeros (and the scalar level always runs) */
    for (int i = 0; i < 64; i++) x[i] = (float)i;
    assert_int_equal(tensor_matmul_at_level(NULL, STRATA_SIMD_SCALAR, STRATA_TYPE_Q8_0, w, 4, 64, x, 1, y, scratch), 0);
    for (int i = 0; i < 4; i++) assert_true(y[i] == 0.0f);
    /* a level the CPU lacks is refused rather than crashing */
    if (max_level() < STRATA_SIMD_AVX512)
        assert_int_equal(tensor_matmul_at_level(NULL, STRATA_SIMD_AVX512, STRATA_TYPE_Q8_0, w, 4, 64, x, 1, y, scratch),
                         STRATA_EUNSUPPORTED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_kernels_vs_scalar),
        cmocka_unit_test(test_matmul_vs_reference),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_default_level),
    };
    (void)TEST_SANITIZED;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
