/* Attention over the paged KV cache with an online softmax (see
 * attention.h for the math, the tiles and the invariance argument).
 *
 * The tiled loop (attn_tile): per (tile, KV head) item, each block of F16
 * rows is widened to float32 once (keys and values) and then used by every
 * query head of the group for every token of the tile, so the rows are
 * widened once per tile instead of once per token. Scores go through
 * tensor/attn_f16.h's qk (tensor_dot_f32's lanes and reduction tree, eight
 * keys at a time), the exponentials through tensor_exp (element-wise,
 * independent of n), the rescale and the value accumulation through its pv
 * (a rounded multiply, then a rounded add, per element, rows in position
 * order); so nothing depends on how many rows a block holds beyond the
 * rows themselves, nor on the tile.
 *
 * Q8_0 rows go through tensor/attn_q8.h's kernels instead (integer
 * scores per block, values from their codes), chosen per row type; their
 * scores are computed for all of a tile's queries in one call.
 *
 * The reference loop (ref_item, one token per item) is the computation as
 * it was before the tiles, kept for the tests: it widens with the tiled
 * loop's kernel (exact at every level), its value sum here has a scalar
 * reference and an AVX2 variant that give the same bits (the product and
 * the sum rounded separately in both), and its dot products go through
 * tensor_dot_f32 itself. */
#include "attention.h"

#include "base/cpu.h"
#include "gguf/types.h"
#include "tensor/attn_f16.h"
#include "tensor/attn_q8.h"
#include "tensor/fp16.h"
#include "tensor/ops.h"
#include "tensor/quant.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* the reference's multiply-adds round twice, as the kernels' do (gcc in
 * ISO C mode never contracts; clang would, per statement) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define ATTN_HAVE_X86 1
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

/* The reference's value sum (its F16 rows are widened by the tiled
 * loop's kernel: widening is exact at every level, so sharing it changes
 * no bits). */
static attn_axpy_fn axpy_for_cpu(void)
{
#ifdef ATTN_HAVE_X86
    if (strata_cpu_level() >= STRATA_SIMD_AVX2) return axpy_avx2;
#endif
    return axpy_scalar;
}

/* --- scores: soft-cap and window --- */

/* First position a token at p sees. */
static int64_t window_lo(const model_attn_args *a, int64_t p)
{
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* Scores sg[0..nv) of block b's rows, already scaled: soft-capped
 * (c tanh(s / c), tensor_softcap) and masked to -inf before lo.
 * Element-wise: the same bits in both loops. */
static void scores_finish(const model_attn_args *a, float *sg, int64_t nv, int64_t b, int64_t lo)
{
    if (a->softcap > 0.0f) tensor_softcap(sg, a->softcap, nv);
    const int64_t row0 = b * a->kv->block_tokens;
    for (int64_t j = 0; j < nv && row0 + j < lo; j++) sg[j] = -INFINITY;
}

/* The factor that turns head h's accumulator into its output: 1 / l, or
 * with a sink z, e^(m - m') / (l e^(m - m') + e^(z - m')) with
 * m' = max(m, z). 0 rather than NaN when nothing was added (l = 0). */
static float out_factor(const model_attn_args *a, int64_t h, float m, float l)
{
    if (a->sinks == NULL) return l > 0.0f ? 1.0f / l : 0.0f;
    const float z = a->sinks[h];
    const float mn = m > z ? m : z;
    const float c = m == -INFINITY ? 0.0f : expf(m - mn);
    const float lt = l * c + expf(z - mn);
    return lt > 0.0f ? c / lt : 0.0f;
}

/* --- the loop --- */

#define R16(x) (((x) + 15) / 16 * 16)

/* Floats that hold n_blk Q8_0 blocks for each of g query heads. */
static size_t q8_query_floats(size_t g, int64_t head_dim)
{
    return (g * (size_t)(head_dim / TENSOR_QK) * sizeof(block_q8_0) + sizeof(float) - 1) /
           sizeof(float);
}

/* Query tokens per tile at most: a tile's widened key and value block
 * serves this many tokens times the G heads of its KV head. */
#define ATTN_TILE_TOKENS 16

size_t model_attention_scratch_floats(const kv_cache *kv, int64_t n_head)
{
    /* the tiled loop's layout (attn_tile), which also covers the
     * reference's (the same parts for G queries instead of Q) */
    size_t nq = (size_t)ATTN_TILE_TOKENS * (size_t)(n_head / kv->n_head_kv);
    size_t bt = (size_t)kv->block_tokens;
    size_t hd = (size_t)kv->head_dim, hdv = (size_t)kv->head_dim_v;
    /* scores (Q, bt), acc (Q, hdv), m, l, c, live (Q each); then per row type
     * either the block widened to float ((bt, hd) keys, (bt, hdv) values)
     * or, for Q8_0 keys, the queries quantized; each rounded to 16 floats
     * to keep the parts 64 bytes apart */
    size_t n = R16(nq * bt) + R16(nq * hdv) + 4 * R16(nq);
    n += kv->k_type == STRATA_TYPE_Q8_0 ? R16(q8_query_floats(nq, kv->head_dim)) : R16(bt * hd);
    n += kv->v_type == STRATA_TYPE_Q8_0 ? 0 : R16(bt * hdv);
    return n;
}

typedef struct attn_job {
    const model_attn_args *a;
    attn_axpy_fn ref_axpy;         /* the reference's value sum */
    const tensor_attn_f16 *f16;    /* the tiled loop's */
    const tensor_attn_q8 *q8;
    int64_t max_tile;              /* tokens per tile at most */
    tensor_quant_fn quant_q8; /* the reference Q8_0 quantizer (deterministic) */
    size_t scratch_floats;
} attn_job;

/* One (token, KV head) item: the G query heads kvh*G .. kvh*G+G-1. Per
 * block of the sequence, first the G heads' scores, then each head's
 * online-softmax update, then the values; every float step of a head is
 * the same whatever G is, so splitting the phases changes no bits. */
static void ref_item(const model_attn_args *a, const attn_job *job, float *scratch, int64_t t,
                     int64_t kvh)
{
    const kv_cache *kv = a->kv;
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
    const int32_t *table = kv_seq_layer_blocks(kv, s, a->layer);
    const int64_t p = a->pos[t];
    const int64_t n_blocks = p / bt + 1;
    const float *q = a->q + (size_t)t * (size_t)(a->n_head * hd) + (size_t)(kvh * G * hd);
    const int64_t nbk = hd / TENSOR_QK, nbv = hdv / TENSOR_QK;
    if (k_q8) {
        /* q per 32-block to int8 with a scale, as the matmul activations;
         * depends on q alone */
        for (int64_t g = 0; g < G; g++) job->quant_q8(q + g * hd, qq + g * nbk, hd);
    }

    const int64_t lo = window_lo(a, p);
    for (int64_t b = lo / bt; b < n_blocks; b++) {
        const int64_t nv = b == n_blocks - 1 ? p % bt + 1 : bt;
        int32_t id = table[b];
        const uint8_t *kb = kv_k_block(kv, a->layer, id, kvh);
        const uint8_t *vb = kv_v_block(kv, a->layer, id, kvh);
        if (k_q8) {
            job->q8->qk(scores, (size_t)bt, qq, G, kb, kv->k_row_bytes, nv, nbk);
            for (int64_t g = 0; g < G; g++) {
                for (int64_t j = 0; j < nv; j++) scores[g * bt + j] *= a->scale;
            }
        } else {
            job->f16->widen(kf, (const uint16_t *)(const void *)kb, nv * hd);
            for (int64_t g = 0; g < G; g++) {
                for (int64_t j = 0; j < nv; j++) {
                    scores[g * bt + j] = tensor_dot_f32(q + g * hd, kf + j * hd, hd) * a->scale;
                }
            }
        }
        if (!v_q8) job->f16->widen(vf, (const uint16_t *)(const void *)vb, nv * hdv);
        for (int64_t g = 0; g < G; g++) {
            float *sg = scores + g * bt;
            float *ag = acc + g * hdv;
            scores_finish(a, sg, nv, b, lo);
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
                for (int64_t j = 0; j < nv; j++) job->ref_axpy(ag, sg[j], vf + j * hdv, hdv);
            }
        }
        /* Q8_0 values: acc_g += (p_gj d_j) v_j from the codes, all heads
         * per loaded row, rows in position order */
        if (v_q8) job->q8->pv(acc, (size_t)hdv, scores, (size_t)bt, G, vb, kv->v_row_bytes, nv, nbv);
    }

    float *o = a->out + (size_t)t * (size_t)(a->n_head * hdv) + (size_t)(kvh * G * hdv);
    for (int64_t g = 0; g < G; g++) {
        /* l >= 1 unless every score was -inf or NaN; 0 then rather than NaN */
        float inv = out_factor(a, kvh * G + g, m[g], l[g]);
        for (int64_t d = 0; d < hdv; d++) o[g * hdv + d] = acc[g * hdv + d] * inv;
    }
}

static void ref_run(void *ctx, int i_thread, int n_threads)
{
    const attn_job *job = ctx;
    const model_attn_args *a = job->a;
    float *scratch = a->scratch + (size_t)i_thread * job->scratch_floats;
    const int64_t n_kv = a->kv->n_head_kv;
    const int64_t n_items = a->n_tokens * n_kv;
    /* Round-robin: neighbouring items (same token, or adjacent positions)
     * cost about the same, so this balances the causal triangle. */
    for (int64_t i = i_thread; i < n_items; i += n_threads) {
        ref_item(a, job, scratch, i / n_kv, i % n_kv);
    }
}

static attn_job job_for(const model_attn_args *a)
{
    return (attn_job){
        .a = a,
        .ref_axpy = axpy_for_cpu(),
        .f16 = tensor_attn_f16_get(),
        .q8 = tensor_attn_q8_get(),
        .quant_q8 = tensor_get_quant(STRATA_TYPE_Q8_0),
        .max_tile = 1,
        .scratch_floats = model_attention_scratch_floats(a->kv, a->n_head),
    };
}

void model_attention_ref(strata_pool *pool, const model_attn_args *a)
{
    assert(a->n_head % a->kv->n_head_kv == 0);
    attn_job job = job_for(a);
    if (a->n_tokens * a->kv->n_head_kv == 1) ref_run(&job, 0, 1);
    else strata_pool_run(pool, ref_run, &job);
}

/* --- the tiled loop --- */

/* The end of the tile that starts at token t0: the tokens after it while
 * they continue t0's sequence at the next position, within the same
 * block, up to max_tile tokens. So a tile's tokens share their last block,
 * and a batch in any other layout falls back to tiles of one token. */
static int64_t tile_end(const model_attn_args *a, int64_t t0, int64_t max_tile)
{
    const int32_t bt = a->kv->block_tokens;
    int64_t e = t0 + 1;
    while (e < a->n_tokens && e - t0 < max_tile && a->seq_ids[e] == a->seq_ids[t0] &&
           a->pos[e] == a->pos[e - 1] + 1 && a->pos[e] % bt != 0) {
        e++;
    }
    return e;
}

static int64_t count_tiles(const model_attn_args *a, int64_t max_tile)
{
    int64_t n = 0;
    for (int64_t t = 0; t < a->n_tokens; t = tile_end(a, t, max_tile)) n++;
    return n;
}

/* One tile item: tokens t0 .. t0+n_t-1 (one sequence, positions p0 ..
 * p0+n_t-1, one last block) and the G query heads of KV head kvh; query
 * qi = i * G + g is token t0+i's head kvh*G+g. Each block is widened once
 * for all n_t * G queries; for each query the float steps are ref_item's,
 * in its order: the scores of the block's first nv rows (nv = bt, or
 * p % bt + 1 in the token's last block), the online-softmax update, the
 * rescale and the values of those rows in position order. */
static void attn_tile(const model_attn_args *a, const attn_job *job, float *scratch, int64_t t0,
                      int64_t n_t, int64_t kvh)
{
    const kv_cache *kv = a->kv;
    const tensor_attn_f16 *f16 = job->f16;
    const int64_t G = a->n_head / kv->n_head_kv;
    const int64_t nq = n_t * G;
    const int64_t hd = kv->head_dim, hdv = kv->head_dim_v;
    const int64_t bt = kv->block_tokens;
    const bool k_q8 = kv->k_type == STRATA_TYPE_Q8_0, v_q8 = kv->v_type == STRATA_TYPE_Q8_0;
    /* the parts as model_attention_scratch_floats lays them out for
     * ATTN_TILE_TOKENS tokens (n_t <= that) */
    const size_t nq_max = (size_t)(ATTN_TILE_TOKENS * G);
    float *scores = scratch;                   /* (Q, bt) */
    float *acc = scores + R16(nq_max * (size_t)bt); /* (Q, hdv) */
    float *m = acc + R16(nq_max * (size_t)hdv);     /* (Q) running maxima */
    float *l = m + R16(nq_max);                /* (Q) running sums */
    float *cs = l + R16(nq_max);               /* (Q) this block's rescale factors */
    float *live = cs + R16(nq_max);            /* (Q) 1: the head adds this block, 0: not */
    float *rest = live + R16(nq_max);
    float *kf = rest;                          /* F16 keys: (bt, hd) */
    block_q8_0 *qq = (block_q8_0 *)(void *)rest; /* Q8_0 keys: (Q, hd / 32) */
    rest += k_q8 ? R16(q8_query_floats(nq_max, hd)) : (size_t)R16(bt * hd);
    float *vf = rest;                          /* F16 values: (bt, hdv) */
    for (int64_t qi = 0; qi < nq; qi++) {
        m[qi] = -INFINITY;
        l[qi] = 0.0f;
    }
    memset(acc, 0, (size_t)(nq * hdv) * sizeof(float));

    const kv_seq *s = &kv->seqs[a->seq_ids[t0]];
    const int32_t *table = kv_seq_layer_blocks(kv, s, a->layer);
    const int64_t p0 = a->pos[t0];
    const int64_t last = p0 / bt; /* every token's last block */
    const size_t q_stride = (size_t)(a->n_head * hd);
    const float *q0 = a->q + (size_t)t0 * q_stride + (size_t)(kvh * G * hd);
#define QROW(qi) (q0 + (size_t)((qi) / G) * q_stride + (size_t)((qi) % G * hd))
    const int64_t nbk = hd / TENSOR_QK, nbv = hdv / TENSOR_QK;
    if (k_q8) {
        for (int64_t qi = 0; qi < nq; qi++) job->quant_q8(QROW(qi), qq + qi * nbk, hd);
    }

    /* the tile's first token has the earliest window: blocks before it
     * are skipped by every token; later tokens mask what they do not see */
    for (int64_t b = window_lo(a, p0) / bt; b <= last; b++) {
        /* rows the tile's last token reads in this block */
        const int64_t nv_max = b == last ? (p0 + n_t - 1) % bt + 1 : bt;
        int32_t id = table[b];
        const uint8_t *kb = kv_k_block(kv, a->layer, id, kvh);
        const uint8_t *vb = kv_v_block(kv, a->layer, id, kvh);
        if (k_q8) {
            /* scores past a token's own rows are computed and not used */
            job->q8->qk(scores, (size_t)bt, qq, nq, kb, kv->k_row_bytes, nv_max, nbk);
        } else {
            f16->widen(kf, (const uint16_t *)(const void *)kb, nv_max * hd);
        }
        if (!v_q8) f16->widen(vf, (const uint16_t *)(const void *)vb, nv_max * hdv);
        for (int64_t i = 0; i < n_t; i++) {
            const int64_t nv = b == last ? (p0 + i) % bt + 1 : bt;
            float *acc_i = acc + i * G * hdv;
            float *sc_i = scores + i * G * bt;
            bool all_live = true;
            for (int64_t g = 0; g < G; g++) {
                const int64_t qi = i * G + g;
                float *sg = sc_i + g * bt;
                float *ag = acc_i + g * hdv;
                if (k_q8) {
                    for (int64_t j = 0; j < nv; j++) sg[j] *= a->scale;
                } else {
                    f16->qk(sg, QROW(qi), kf, (size_t)hd, nv, hd, a->scale);
                }
                scores_finish(a, sg, nv, b, window_lo(a, p0 + i));
                float mb = -INFINITY;
                for (int64_t j = 0; j < nv; j++) {
                    if (sg[j] > mb) mb = sg[j];
                }
                float mn = m[qi] > mb ? m[qi] : mb;
                float c = m[qi] == -INFINITY ? 0.0f : expf(m[qi] - mn);
                if (mn == -INFINITY) {
                    /* as ref_item: nothing to add, weights 0 */
                    for (int64_t j = 0; j < nv; j++) sg[j] = 0.0f;
                    all_live = false;
                    live[qi] = 0.0f;
                    continue;
                }
                for (int64_t j = 0; j < nv; j++) sg[j] -= mn;
                tensor_exp(sg, sg, nv);
                float sum = 0.0f;
                for (int64_t j = 0; j < nv; j++) sum += sg[j];
                l[qi] = l[qi] * c + sum;
                m[qi] = mn;
                cs[qi] = c;
                live[qi] = 1.0f;
                if (v_q8) tensor_scale(ag, c, hdv);
            }
            if (v_q8) {
                /* a block every token reads whole: one value pass below
                 * for all the tile's queries, each code row loaded once */
                if (b != last) continue;
                job->q8->pv(acc_i, (size_t)hdv, sc_i, (size_t)bt, G, vb, kv->v_row_bytes, nv, nbv);
            } else if (all_live) {
                f16->pv(acc_i, (size_t)hdv, cs + i * G, sc_i, (size_t)bt, G, vf, (size_t)hdv, nv,
                        hdv);
            } else {
                for (int64_t g = 0; g < G; g++) {
                    if (live[i * G + g] == 0.0f) continue;
                    f16->pv(acc_i + g * hdv, (size_t)hdv, cs + i * G + g, sc_i + g * bt,
                            (size_t)bt, 1, vf, (size_t)hdv, nv, hdv);
                }
            }
        }
        /* Q8_0 values of a block before the last: every query's weights
         * are final (rescaled above), and a query's float steps are those
         * of the per-token pass (the kernel keeps queries apart) */
        if (v_q8 && b != last) {
            job->q8->pv(acc, (size_t)hdv, scores, (size_t)bt, nq, vb, kv->v_row_bytes, bt, nbv);
        }
    }
#undef QROW

    for (int64_t i = 0; i < n_t; i++) {
        float *o = a->out + (size_t)(t0 + i) * (size_t)(a->n_head * hdv) + (size_t)(kvh * G * hdv);
        for (int64_t g = 0; g < G; g++) {
            const int64_t qi = i * G + g;
            float inv = out_factor(a, kvh * G + g, m[qi], l[qi]);
            for (int64_t d = 0; d < hdv; d++) o[g * hdv + d] = acc[qi * hdv + d] * inv;
        }
    }
}

static void attn_run(void *ctx, int i_thread, int n_threads)
{
    const attn_job *job = ctx;
    const model_attn_args *a = job->a;
    float *scratch = a->scratch + (size_t)i_thread * job->scratch_floats;
    const int64_t n_kv = a->kv->n_head_kv;
    /* Items (tile, KV head), tile-major, dealt out round-robin: the items
     * of one tile, and of neighbouring tiles, cost about the same, so this
     * balances the causal triangle. Every thread walks the same tiles. */
    int64_t i_item = 0;
    for (int64_t t = 0; t < a->n_tokens;) {
        int64_t e = tile_end(a, t, job->max_tile);
        for (int64_t kvh = 0; kvh < n_kv; kvh++, i_item++) {
            if (i_item % n_threads == i_thread) attn_tile(a, job, scratch, t, e - t, kvh);
        }
        t = e;
    }
}

void model_attention(strata_pool *pool, const model_attn_args *a)
{
    assert(a->n_head % a->kv->n_head_kv == 0);
    attn_job job = job_for(a);
    /* the biggest tiles that still leave a few items per thread */
    const int64_t n_threads = strata_pool_n_threads(pool);
    job.max_tile = ATTN_TILE_TOKENS;
    while (job.max_tile > 1 && count_tiles(a, job.max_tile) * a->kv->n_head_kv < 4 * n_threads)
        job.max_tile /= 2;
    if (count_tiles(a, job.max_tile) * a->kv->n_head_kv == 1) attn_run(&job, 0, 1);
    else strata_pool_run(pool, attn_run, &job);
}

#undef R16
