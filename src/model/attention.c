/* Attention over the paged KV cache with an online softmax (see
 * attention.h for the math and the invariance argument).
 *
 * Per (token, KV head) item, each block of F16 rows is widened to float32
 * once (keys and values) and then used by every query head
 * of the group, so grouped-query attention reads each cached row once per
 * token. Dot products go through tensor_dot_f32 (a fixed reduction order,
 * the same in every SIMD variant); the exponentials through tensor_exp
 * (element-wise, independent of n); the value accumulation is an
 * element-wise multiply-add, so nothing here depends on how many rows a
 * block holds beyond the rows themselves.
 *
 * Q8_0 rows go through tensor/attn_q8.h's kernels instead (integer
 * scores per block, values from their codes), chosen per row type.
 *
 * The two kernels here have a scalar reference and an AVX2 variant that
 * give the same bits: the F16 -> F32 widening is exact in both (F16C
 * instruction vs bit manipulation), and the value accumulation rounds the
 * product and the sum separately in both. So the variant changes speed
 * only. (They belong in the backend's op table once there is one.) */
#include "attention.h"

#include "base/cpu.h"
#include "gguf/types.h"
#include "tensor/attn_q8.h"
#include "tensor/fp16.h"
#include "tensor/ops.h"
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTN_HAVE_X86 1
#endif

/* --- F16 rows to float32 --- */

typedef void (*attn_widen_fn)(float *dst, const uint16_t *src, int64_t n);

static void widen_scalar(float *dst, const uint16_t *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = tensor_f16_to_f32(src[i]);
}

#ifdef ATTN_HAVE_X86
__attribute__((target("avx2,f16c"))) static void widen_f16c(float *dst, const uint16_t *src,
                                                              int64_t n)
{
    int64_t i = 0;
    /* each step: 8 halves in, 8 floats out (exact) */
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = tensor_f16_to_f32(src[i]);
}
#endif

/* --- acc += p * v over a row: a multiply then an add per element (no
 * fused multiply-add), so every variant rounds exactly as the scalar one
 * does --- */

typedef void (*attn_axpy_fn)(float *acc, float p, const float *v, int64_t n);

static void axpy_scalar(float *acc, float p, const float *v, int64_t n)
{
    for (int64_t d = 0; d < n; d++) acc[d] += p * v[d];
}

#ifdef ATTN_HAVE_X86
__attribute__((target("avx2"))) static void axpy_avx2(float *acc, float p, const float *v,
                                                        int64_t n)
{
    const __m256 pv = _mm256_set1_ps(p);
    int64_t d = 0;
    /* 8 lanes = 8 consecutive dims of the row */
    for (; d + 8 <= n; d += 8) {
        __m256 prod = _mm256_mul_ps(pv, _mm256_loadu_ps(v + d));
        _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), prod));
    }
    for (; d < n; d++) acc[d] += p * v[d];
}
#endif

typedef struct attn_kernels {
    attn_widen_fn widen;
    attn_axpy_fn axpy;
} attn_kernels;

static attn_kernels kernels_for_cpu(void)
{
#ifdef ATTN_HAVE_X86
    if (strata_cpu_level() >= STRATA_SIMD_AVX2) return (attn_kernels){widen_f16c, axpy_avx2};
#endif
    return (attn_kernels){widen_scalar, axpy_scalar};
}

/* --- the loop --- */

#define R16(x) (((x) + 15) / 16 * 16)

/* Floats that hold n_blk Q8_0 blocks for each of g query heads. */
static size_t q8_query_floats(size_t g, int64_t head_dim)
{
    return (g * (size_t)(head_dim / TENSOR_QK) * sizeof(block_q8_0) + sizeof(float) - 1) /
           sizeof(float);
}

size_t model_attention_scratch_floats(const kv_cache *kv, int64_t n_head)
{
    size_t g = (size_t)(n_head / kv->n_head_kv);
    size_t bt = (size_t)kv->block_tokens;
    size_t hd = (size_t)kv->head_dim, hdv = (size_t)kv->head_dim_v;
    /* scores (g, bt), acc (g, hdv), m (g), l (g); then per row type either
     * the block widened to float ((bt, hd) keys, (bt, hdv) values) or, for
     * Q8_0 keys, the queries quantized; each rounded to 16 floats to keep
     * the parts 64 bytes apart */
    size_t n = R16(g * bt) + R16(g * hdv) + R16(g) + R16(g);
    n += kv->k_type == STRATA_TYPE_Q8_0 ? R16(q8_query_floats(g, kv->head_dim)) : R16(bt * hd);
    n += kv->v_type == STRATA_TYPE_Q8_0 ? 0 : R16(bt * hdv);
    return n;
}

typedef struct attn_job {
    const model_attn_args *a;
    attn_kernels k;
    const tensor_attn_q8 *q8;
    tensor_quant_fn quant_q8; /* the reference Q8_0 quantizer (deterministic) */
    size_t scratch_floats;
} attn_job;

/* One (token, KV head) item: the G query heads kvh*G .. kvh*G+G-1. Per
 * block of the sequence, first the G heads' scores, then each head's
 * online-softmax update, then the values; every float step of a head is
 * the same whatever G is, so splitting the phases changes no bits. */
static void attn_item(const model_attn_args *a, const attn_job *job, float *scratch, int64_t t,
                      int64_t kvh)
{
    const kv_cache *kv = a->kv;
    const attn_kernels *kern = &job->k;
    const int64_t G = a->n_head / kv->n_head_kv;
    const int64_t hd = kv->head_dim, hdv = kv->head_dim_v;
    const int64_t bt = kv->block_tokens;
    const bool k_q8 = kv->k_type == STRATA_TYPE_Q8_0, v_q8 = kv->v_type == STRATA_TYPE_Q8_0;
    float *scores = scratch;                   /* (G, bt) */
    float *acc = scores + R16(G * bt);         /* (G, hdv) */
    float *m = acc + R16(G * hdv);             /* (G) running maxima */
    float *l = m + R16(G);                     /* (G) running sums */
    float *rest = l + R16(G);
    /* F16 keys: this block's keys as float (bt, hd); Q8_0 keys: the G
     * queries quantized, (G, hd / 32) blocks */
    float *kf = rest;
    block_q8_0 *qq = (block_q8_0 *)(void *)rest;
    rest += k_q8 ? R16(q8_query_floats((size_t)G, hd)) : (size_t)R16(bt * hd);
    float *vf = rest;                          /* F16 values: (bt, hdv) */
    for (int64_t g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(acc, 0, (size_t)(G * hdv) * sizeof(float));

    const kv_seq *s = &kv->seqs[a->seq_ids[t]];
    const int64_t p = a->pos[t];
    const int64_t n_blocks = p / bt + 1;
    const float *q = a->q + (size_t)t * (size_t)(a->n_head * hd) + (size_t)(kvh * G * hd);
    const int64_t nbk = hd / TENSOR_QK, nbv = hdv / TENSOR_QK;
    if (k_q8) {
        /* q per 32-block to int8 with a scale, as the matmul activations;
         * depends on q alone */
        for (int64_t g = 0; g < G; g++) job->quant_q8(q + g * hd, qq + g * nbk, hd);
    }

    for (int64_t b = 0; b < n_blocks; b++) {
        const int64_t nv = b == n_blocks - 1 ? p % bt + 1 : bt;
        int32_t id = s->blocks[b];
        const uint8_t *kb = kv_k_block(kv, a->layer, id, kvh);
        const uint8_t *vb = kv_v_block(kv, a->layer, id, kvh);
        if (k_q8) {
            job->q8->qk(scores, (size_t)bt, qq, G, kb, kv->k_row_bytes, nv, nbk);
            for (int64_t g = 0; g < G; g++) {
                for (int64_t j = 0; j < nv; j++) scores[g * bt + j] *= a->scale;
            }
        } else {
            kern->widen(kf, (const uint16_t *)(const void *)kb, nv * hd);
            for (int64_t g = 0; g < G; g++) {
                for (int64_t j = 0; j < nv; j++) {
                    scores[g * bt + j] = tensor_dot_f32(q + g * hd, kf + j * hd, hd) * a->scale;
                }
            }
        }
        if (!v_q8) kern->widen(vf, (const uint16_t *)(const void *)vb, nv * hdv);
        for (int64_t g = 0; g < G; g++) {
            float *sg = scores + g * bt;
            float *ag = acc + g * hdv;
            float mb = -INFINITY;
            for (int64_t j = 0; j < nv; j++) {
                if (sg[j] > mb) mb = sg[j];
            }
            float mn = m[g] > mb ? m[g] : mb;
            /* e^(m - m') rescales what came before; the first block has
             * nothing before it (acc and l are 0), and m = -inf there. */
            float c = m[g] == -INFINITY ? 0.0f : expf(m[g] - mn);
            if (mn == -INFINITY) {
                /* every score -inf so far: nothing to add (weights 0 for
                 * the shared Q8_0 value pass: acc + 0 * v leaves acc) */
                for (int64_t j = 0; j < nv; j++) sg[j] = 0.0f;
                continue;
            }
            for (int64_t j = 0; j < nv; j++) sg[j] -= mn;
            tensor_exp(sg, sg, nv);
            float sum = 0.0f;
            for (int64_t j = 0; j < nv; j++) sum += sg[j];
            l[g] = l[g] * c + sum;
            m[g] = mn;
            tensor_scale(ag, c, hdv);
            /* acc += p_j v_j, element-wise, rows in position order */
            if (!v_q8) {
                for (int64_t j = 0; j < nv; j++) kern->axpy(ag, sg[j], vf + j * hdv, hdv);
            }
        }
        /* Q8_0 values: acc_g += (p_gj d_j) v_j from the codes, all heads
         * per loaded row, rows in position order */
        if (v_q8) job->q8->pv(acc, (size_t)hdv, scores, (size_t)bt, G, vb, kv->v_row_bytes, nv, nbv);
    }

    float *o = a->out + (size_t)t * (size_t)(a->n_head * hdv) + (size_t)(kvh * G * hdv);
    for (int64_t g = 0; g < G; g++) {
        /* l >= 1 unless every score was -inf or NaN; 0 then rather than NaN */
        float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        for (int64_t d = 0; d < hdv; d++) o[g * hdv + d] = acc[g * hdv + d] * inv;
    }
}

#undef R16

static void attn_run(void *ctx, int i_thread, int n_threads)
{
    const attn_job *job = ctx;
    const model_attn_args *a = job->a;
    float *scratch = a->scratch + (size_t)i_thread * job->scratch_floats;
    const int64_t n_kv = a->kv->n_head_kv;
    const int64_t n_items = a->n_tokens * n_kv;
    /* Round-robin: neighbouring items (same token, or adjacent positions)
     * cost about the same, so this balances the causal triangle. */
    for (int64_t i = i_thread; i < n_items; i += n_threads) {
        attn_item(a, job, scratch, i / n_kv, i % n_kv);
    }
}

void model_attention(strata_pool *pool, const model_attn_args *a)
{
    assert(a->n_head % a->kv->n_head_kv == 0);
    attn_job job = {
        .a = a,
        .k = kernels_for_cpu(),
        .q8 = tensor_attn_q8_get(),
        .quant_q8 = tensor_get_quant(STRATA_TYPE_Q8_0),
        .scratch_floats = model_attention_scratch_floats(a->kv, a->n_head),
    };
    if (a->n_tokens * a->kv->n_head_kv == 1) attn_run(&job, 0, 1);
    else strata_pool_run(pool, attn_run, &job);
}
