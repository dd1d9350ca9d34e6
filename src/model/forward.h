/* The forward pass: a batch of tokens from many sequences in, logits out.
 *
 * A model_ctx holds everything one stream of forward passes needs besides
 * the weights: the KV cache (sized from the context asked for), a thread
 * pool, and every scratch buffer, all allocated by model_ctx_init, so
 * model_forward allocates nothing.
 *
 * A batch lists tokens with their sequence id and position. Each sequence's
 * tokens must appear in the batch in consecutive positions p0, p0+1, ...,
 * with p0 at most the sequence's current length; the cache keeps positions
 * [0, p0) and the batch's tokens replace whatever came after (rewinding a
 * sequence is just giving an earlier p0). Batches longer than n_batch are
 * run in chunks of n_batch tokens (chunked prefill); every chunk goes
 * through the same matrix kernels, which take a matrix x matrix path for
 * many tokens and a matrix x vector path for one.
 *
 * Batch invariance: the logits of a token depend only on its own sequence
 * (its tokens and positions), never on what else is in the batch, the
 * chunk size, or the number of threads: every op is row-wise or a matrix
 * product whose rows are computed independently (tensor_matmul), and
 * attention's reduction order is fixed by the sequence's own positions
 * (attention.h).
 *
 * Threads: a model_ctx is used by one thread at a time; its pool does the
 * parallel work. Several contexts may share one model. */
#ifndef STRATA_MODEL_FORWARD_H
#define STRATA_MODEL_FORWARD_H

#include "base/err.h"
#include "base/threadpool.h"
#include "model/kv_cache.h"
#include "model/model.h"

#include <stdint.h>

typedef struct model_ctx_params {
    int64_t n_ctx;     /* KV positions in all, shared by the sequences; > 0 */
    int n_seq_max;     /* sequence slots (ids 0 .. n_seq_max-1); 0 means 1 */
    int64_t n_ctx_seq; /* the most positions one sequence may reach; 0 means
                          n_ctx / n_seq_max. Chooses LongRoPE's factor set
                          (model_hparams.n_ctx_orig_factors) */
    int64_t n_batch;   /* tokens per chunk; 0 means MODEL_DEFAULT_BATCH */
    int n_threads;     /* threads of the context's pool; 0 means 1 */
    uint32_t k_type;   /* KV cache key rows: STRATA_TYPE_F16 or STRATA_TYPE_Q8_0;
                          0 means F16 (see kv_cache_params) */
    uint32_t v_type;   /* value rows, likewise */
    strata_pool *pool; /* borrowed: run on this pool (another context's, which
                          must outlive this one; n_threads is then its size);
                          NULL: a pool of its own */
} model_ctx_params;

#define MODEL_DEFAULT_BATCH 512

typedef struct model_batch {
    int64_t n_tokens;
    const int32_t *tokens;      /* (n_tokens) ids in [0, n_vocab) */
    const int32_t *seq_ids;     /* (n_tokens) active sequences of the context's cache */
    const int32_t *pos;         /* (n_tokens) positions, see above */
    const int8_t *want_logits;  /* (n_tokens) nonzero: return this token's logits;
                                   NULL: every token's */
} model_batch;

typedef struct model_ctx model_ctx;

/* Makes a context for m (which must outlive it). *out is owned by the
 * caller; free with model_ctx_free. Errors: STRATA_EINVAL for bad
 * parameters (including a Q8_0 KV type for a model whose head size is not a
 * multiple of 32, with a message that says so), STRATA_ENOMEM. */
int model_ctx_init(model_ctx **out, const model *m, const model_ctx_params *p, strata_err *err);
void model_ctx_free(model_ctx *ctx);

/* Gives the memory of the step buffers (activations, matmul and attention
 * scratch) back to the operating system; they hold nothing between
 * steps, and the next step faults their pages in again. For an idle
 * engine, so that its RSS falls to weights + KV. Not while a step runs. */
void model_ctx_release_scratch(model_ctx *ctx);

/* The context's KV cache: start and end sequences with kv_seq_add and
 * kv_seq_remove. Valid until model_ctx_free. */
kv_cache *model_ctx_kv(model_ctx *ctx);

const model *model_ctx_model(const model_ctx *ctx);

/* The context's thread pool (NULL for one thread): to lend to another
 * context run by the same thread (model_ctx_params.pool). */
strata_pool *model_ctx_pool(model_ctx *ctx);

/* Runs the batch. logits_out receives (n_out, n_vocab) floats, one row per
 * token asked for, in batch order (n_out = the number of nonzero
 * want_logits, or n_tokens); it may be NULL when n_out is 0. The batch is
 * checked in full before anything changes: STRATA_EINVAL for a token id out
 * of range, an inactive sequence, positions that break the rule above, or
 * a first position that would write into a block shared with another
 * sequence or published in the prefix cache (kv_seq_check_writable: a
 * programming error, caught in every build at one check per sequence);
 * STRATA_ERANGE when the KV cache has no room (nothing is changed then).
 * The batch's positions are in the cache afterwards. */
int model_forward(model_ctx *ctx, const model_batch *b, float *logits_out, strata_err *err);

/* As model_forward, and also hands out final hidden states (rmsnorm(x) *
 * output_norm: what the output matrix multiplies, the input of embedding
 * pooling). want_embd is (n_tokens) or NULL: a nonzero entry asks for that
 * token's state; embd_out receives (n_embd_out, n_embd) floats, one row per
 * token asked for, in batch order (it may be NULL when none is asked for).
 * A token may be asked for logits, a hidden state, both or neither. The
 * same checks and errors as model_forward, plus STRATA_EINVAL when a state
 * is asked for and embd_out is NULL. */
int model_forward_ex(model_ctx *ctx, const model_batch *b, float *logits_out,
                     const int8_t *want_embd, float *embd_out, strata_err *err);

#endif
