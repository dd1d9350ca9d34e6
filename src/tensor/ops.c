/* Element ops: the scalar reference of each op, the rope angles every
 * variant shares, and the choice of variant table (see ops.h).
 *
 * The reference is plain C on floats, written in the order the SIMD
 * variants must reproduce or approximate: where ops.h promises bit-exact
 * agreement (dot, rmsnorm, rope, add, mul, scale), the loops below define
 * the order of every rounding. Floating-point contraction (a*b+c turned
 * into one fma) would change those roundings, so it is kept off: GCC does
 * not contract in ISO C mode (-std=c11, which the build uses), and clang is
 * told so below. */
#include "ops_internal.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* --- shared reductions ---
 * The 16-lane double tree that rmsnorm and softmax sum with, and the 32-lane
 * float fma tree of dot: lane j takes the elements i = j mod L in order,
 * then lane j += lane j + L/2, j + L/4, ..., j + 1. */

static double sum16_tree(double acc[16])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

/* --- scalar reference --- */

static void rmsnorm_scalar(float *out, const float *x, const float *w, int64_t n, float eps)
{
    if (n <= 0) return;
    double acc[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        float sq = x[i] * x[i];
        acc[i & 15] += (double)sq;
    }
    /* As GGML: mean in double rounded to float, then the scale in float. */
    float mean = (float)(sum16_tree(acc) / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    if (w == NULL) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
    } else {
        for (int64_t i = 0; i < n; i++) {
            float y = x[i] * scale; /* rounded here, as GGML's separate mul op does */
            out[i] = y * w[i];
        }
    }
}

void tensor_rope_angles_init(tensor_rope_angles *a, int64_t pos, float freq_base,
                             float freq_scale, const float *freq_factors, int n_rot)
{
    a->theta = (float)pos;
    a->theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    a->freq_scale = freq_scale;
    a->freq_factors = freq_factors;
    a->k_next = 0;
}

void tensor_rope_angles_next(tensor_rope_angles *a, float *cos_k, float *sin_k, int n_pairs)
{
    for (int k = 0; k < n_pairs; k++) {
        float factor = a->freq_factors != NULL ? a->freq_factors[a->k_next + k] : 1.0f;
        /* GGML's rope_yarn without extrapolation mixing:
         * theta_interp = freq_scale * (theta / factor). */
        float theta = a->freq_scale * (a->theta / factor);
        cos_k[k] = cosf(theta);
        sin_k[k] = sinf(theta);
        a->theta *= a->theta_scale;
    }
    a->k_next += n_pairs;
}

static void rope_scalar(float *x, int n_head, int head_dim, int n_rot, int64_t pos, float freq_base,
                        float freq_scale, const float *freq_factors, int mode)
{
    assert(n_rot % 2 == 0 && n_rot <= head_dim);
    assert(mode == TENSOR_ROPE_NORMAL || mode == TENSOR_ROPE_NEOX);
    if (n_rot <= 0 || n_head <= 0) return;
    const int half = n_rot / 2;
    tensor_rope_angles ang;
    tensor_rope_angles_init(&ang, pos, freq_base, freq_scale, freq_factors, n_rot);
    float cos_k[TENSOR_ROPE_CHUNK], sin_k[TENSOR_ROPE_CHUNK];
    for (int k0 = 0; k0 < half; k0 += TENSOR_ROPE_CHUNK) {
        int n_pairs = half - k0 < TENSOR_ROPE_CHUNK ? half - k0 : TENSOR_ROPE_CHUNK;
        tensor_rope_angles_next(&ang, cos_k, sin_k, n_pairs);
        for (int h = 0; h < n_head; h++) {
            float *xh = x + (int64_t)h * head_dim;
            for (int k = 0; k < n_pairs; k++) {
                int i0 = mode == TENSOR_ROPE_NEOX ? k0 + k : 2 * (k0 + k);
                int i1 = mode == TENSOR_ROPE_NEOX ? k0 + k + half : 2 * (k0 + k) + 1;
                float a = xh[i0], b = xh[i1];
                xh[i0] = a * cos_k[k] - b * sin_k[k];
                xh[i1] = a * sin_k[k] + b * cos_k[k];
            }
        }
    }
}

static void softmax_scalar(float *x, int64_t n)
{
    if (n <= 0) return;
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    if (max == -INFINITY) { /* every entry masked */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double acc[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        float e = expf(x[i] - max);
        x[i] = e;
        acc[i & 15] += (double)e;
    }
    float inv = (float)(1.0 / sum16_tree(acc));
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static void exp_scalar(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = expf(x[i]);
}

static void silu_scalar(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = x[i] / (1.0f + expf(-x[i]));
}

static void gelu_scalar(float *out, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        float inner = TENSOR_GELU_C2A * (v * v);
        float y2 = v * (inner + TENSOR_GELU_C2);
        out[i] = v / (1.0f + expf(-y2));
    }
}

static void softcap_scalar(float *x, float c, int64_t n)
{
    const float inv_c = 1.0f / c;
    for (int64_t i = 0; i < n; i++) x[i] = c * tanhf(x[i] * inv_c);
}

static void add_scalar(float *out, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void mul_scalar(float *out, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) out[i] = a[i] * b[i];
}

static void scale_scalar(float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void swiglu_scalar(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        float silu = g / (1.0f + expf(-g));
        out[i] = silu * up[i];
    }
}

static float dot_scalar(const float *a, const float *b, int64_t n)
{
    float acc[32] = {0};
    for (int64_t i = 0; i < n; i++) acc[i & 31] = fmaf(a[i], b[i], acc[i & 31]);
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] = acc[j] + acc[j + w];
    return acc[0];
}

const tensor_ops tensor_ops_scalar = {
    .name = "scalar",
    .level = STRATA_SIMD_SCALAR,
    .rmsnorm = rmsnorm_scalar,
    .rope = rope_scalar,
    .softmax = softmax_scalar,
    .exp = exp_scalar,
    .silu = silu_scalar,
    .gelu = gelu_scalar,
    .softcap = softcap_scalar,
    .add = add_scalar,
    .mul = mul_scalar,
    .scale = scale_scalar,
    .swiglu = swiglu_scalar,
    .dot_f32 = dot_scalar,
};

/* --- choosing the table --- */

const tensor_ops *tensor_ops_for_level(enum strata_simd_level level)
{
    if (level > strata_cpu_level_max(strata_cpu_get())) return NULL;
    switch (level) {
    case STRATA_SIMD_SCALAR: return &tensor_ops_scalar;
#if defined(__x86_64__)
    case STRATA_SIMD_AVX2:
    case STRATA_SIMD_AVX512: return &tensor_ops_avx2;
#endif
    default: return NULL;
    }
}

static const tensor_ops *g_ops;
static pthread_once_t g_ops_once = PTHREAD_ONCE_INIT;

static void ops_choose(void)
{
    /* The best table at or below the level: a level this build has no
     * table for falls back to the one below it. */
    for (int level = (int)strata_cpu_level(); level >= 0 && g_ops == NULL; level--)
        g_ops = tensor_ops_for_level((enum strata_simd_level)level);
}

const tensor_ops *tensor_ops_active(void)
{
    pthread_once(&g_ops_once, ops_choose);
    return g_ops;
}

/* --- the public entry points --- */

void tensor_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
    tensor_ops_active()->rmsnorm(out, x, w, n, eps);
}

void tensor_rope(float *x, int n_head, int head_dim, int n_rot, int64_t pos, float freq_base,
                 float freq_scale, const float *freq_factors, int mode)
{
    tensor_ops_active()->rope(x, n_head, head_dim, n_rot, pos, freq_base, freq_scale,
                              freq_factors, mode);
}

void tensor_softmax(float *x, int64_t n)
{
    tensor_ops_active()->softmax(x, n);
}

void tensor_exp(float *out, const float *x, int64_t n)
{
    tensor_ops_active()->exp(out, x, n);
}

void tensor_silu(float *out, const float *x, int64_t n)
{
    tensor_ops_active()->silu(out, x, n);
}

void tensor_gelu(float *out, const float *x, int64_t n)
{
    tensor_ops_active()->gelu(out, x, n);
}

void tensor_softcap(float *x, float c, int64_t n)
{
    tensor_ops_active()->softcap(x, c, n);
}

void tensor_add(float *out, const float *a, const float *b, int64_t n)
{
    tensor_ops_active()->add(out, a, b, n);
}

void tensor_mul(float *out, const float *a, const float *b, int64_t n)
{
    tensor_ops_active()->mul(out, a, b, n);
}

void tensor_scale(float *x, float s, int64_t n)
{
    tensor_ops_active()->scale(x, s, n);
}

void tensor_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
    tensor_ops_active()->swiglu(out, gate, up, n);
}

float tensor_dot_f32(const float *a, const float *b, int64_t n)
{
    return tensor_ops_active()->dot_f32(a, b, n);
}
