/* Causal self-attention over the paged KV cache, for a batch of tokens of
 * many sequences, with grouped-query heads.
 *
 * For token t of sequence s at position p, and each query head h (served
 * by KV head h / (n_head / n_head_kv)):
 *     out[t][h] = sum_{j <= p} softmax_j(scale * q[t][h] . K_s[j]) V_s[j]
 * over the positions of its own sequence only (the causal mask and the
 * isolation of sequences are the same thing here: nothing else is read).
 *
 * Sliding windows (window > 0) keep j > p - window: blocks wholly before
 * the window are skipped, and in the first block the earlier rows get a
 * score of -inf (weight exactly 0). A soft-cap, when given, maps each
 * scaled score s to c tanh(s / c) before the mask and the softmax. An
 * attention sink z_h (gpt-oss) adds e^z_h to head h's denominator:
 * out = sum_j e^(s_j - m') v_j / (sum_j e^(s_j - m') + e^(z_h - m')),
 * m' = max(m, z_h), applied once at the end of the online softmax.
 *
 * The softmax is computed online, streaming over the sequence's blocks in
 * position order: per block, the scores of its rows, the running maximum
 * m, the running sum l and the running output are updated
 *     m' = max(m, max_j s_j),  c = e^(m - m'),
 *     l' = c l + sum_j e^(s_j - m'),  acc' = c acc + sum_j e^(s_j - m') v_j
 * and out = acc / l at the end. No (n_tokens x n_ctx) buffer exists.
 *
 * Batch invariance: the float operations for (t, h) and their order depend
 * only on q[t][h], p and the cached rows of positions 0..p (the block
 * partition is by position, so it is the sequence's own), never on the
 * other tokens of the batch or the thread split. Keys and values are read
 * back from the cache (F16 or Q8_0 rows) even for the batch's own tokens,
 * so a token sees the same values whether its context came in this batch
 * or earlier.
 *
 * Q8_0 rows (tensor/attn_q8.h) are used as int8 codes, never widened to a
 * float block first: the query of each head is quantized to Q8_0 per
 * 32-block of head_dim (from q alone), a score is the sum over blocks of
 * the exact integer dot product times both scales, and a value row adds
 * (p_j * d_j) * code to the accumulator, rows in position order. Keys and
 * values may differ in type (F16 keys with Q8_0 values and the reverse).
 *
 * Tiles: the batch's tokens are cut into tiles, runs of up to 16 tokens
 * that continue one sequence at consecutive positions within one KV block
 * (any other layout gives tiles of one token). A (tile, KV head) item
 * widens each F16 block once for all its tokens and query heads; every
 * (token, head) still performs exactly the float steps it would alone, so
 * the tiling changes speed only (model_attention_ref, the per-token loop,
 * gives the same bits; the tests hold one to the other).
 *
 * Threads: the items are dealt out to the pool's threads round-robin; each
 * item writes only its own heads of `out`. */
#ifndef STRATA_MODEL_ATTENTION_H
#define STRATA_MODEL_ATTENTION_H

#include "base/threadpool.h"
#include "model/kv_cache.h"

#include <stddef.h>
#include <stdint.h>

typedef struct model_attn_args {
    const kv_cache *kv;
    int64_t layer;
    int64_t n_tokens;
    const int32_t *seq_ids;  /* (n_tokens) active sequences of kv */
    const int32_t *pos;      /* (n_tokens) each < its sequence's length */
    const float *q;          /* (n_tokens, n_head * head_dim), after rope */
    float *out;              /* (n_tokens, n_head * head_dim_v) */
    int64_t n_head;          /* a multiple of kv->n_head_kv */
    float scale;             /* usually 1 / sqrt(head_dim) */
    int64_t window;          /* > 0: token at p sees positions p - window + 1 .. p only
                                (sliding-window layers); 0: all of 0 .. p */
    float softcap;           /* > 0: scores -> softcap * tanh(scores / softcap) after the
                                scale (gemma2); 0: none */
    const float *sinks;      /* (n_head) or NULL: a logit per head that joins each softmax's
                                denominator and adds no value (gpt-oss) */
    float *scratch;          /* n_threads * model_attention_scratch_floats(...) */
} model_attn_args;

/* Floats of scratch one thread needs. */
size_t model_attention_scratch_floats(const kv_cache *kv, int64_t n_head);

/* Computes a->out. pool may be NULL; the scratch must cover the pool's
 * thread count. The caller has checked the arguments (this is the inner
 * loop of the forward pass). */
void model_attention(strata_pool *pool, const model_attn_args *a);

/* The same result computed one (token, KV head) at a time, with no tiles:
 * the reference model_attention is tested against (bit for bit). Same
 * arguments and scratch. */
void model_attention_ref(strata_pool *pool, const model_attn_args *a);

#endif
