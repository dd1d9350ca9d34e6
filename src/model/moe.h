/* Mixture-of-experts feed-forward (qwen3moe): binding the expert tensors and
 * running the routed FFN over a chunk of tokens.
 *
 * Per token, with h = rmsnorm(x) * ffn_norm:
 *     p = softmax(h Wr^T)                     (n_expert router probabilities)
 *     E = the n_used largest p (lowest index first on ties), w_k = p_k / sum_E p
 *     out = sum_k w_k · W2_k · (silu(W1_k·h) ⊙ W3_k·h)   (k in rank order)
 * The experts run once each over all the chunk's tokens that chose them:
 * their rows are gathered, multiplied by the expert's matrices in one
 * tensor_matmul each, and each token's result is kept per rank, so the sum
 * is in the token's own rank order whatever else is in the batch (the
 * matmul computes rows independently: batch invariance holds).
 *
 * The expert tensors are 3-D, ne = [n_cols, n_rows, n_expert]; expert e's
 * matrix is the e-th slab of n_rows rows. They stay in the file's layout
 * (no repacking). */
#ifndef STRATA_MODEL_MOE_H
#define STRATA_MODEL_MOE_H

#include "base/err.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* Binds layer il's router (ffn_gate_inp, (n_expert, n_embd), F32 or any
 * matmul type) and its experts into l, with per-expert matrices in
 * slots[0 .. 3 n_expert) (gate, up, down for each expert; owned by the
 * caller, which keeps them alive as long as the model). Errors name the
 * tensor, as model_load's. */
int model_moe_bind(const gguf *g, const model_hparams *hp, int64_t il, model_layer *l,
                   model_matrix *slots, strata_err *err);

/* Scratch of model_moe_ffn for chunks of up to n_batch tokens. */
typedef struct model_moe_bufs {
    float *probs;     /* (n_batch, n_expert) */
    int32_t *sel;     /* (n_batch, n_used) chosen experts, rank order */
    float *wsel;      /* (n_batch, n_used) their weights */
    int32_t *rows;    /* (n_batch) tokens of the current expert */
    int32_t *ranks;   /* (n_batch) the rank it has for each of them */
    float *xg;        /* (n_batch, n_embd) gathered inputs */
    float *gate;      /* (n_batch, n_ff_exp) */
    float *up;        /* (n_batch, n_ff_exp) */
    float *yg;        /* (n_batch, n_embd) an expert's outputs */
    float *ys;        /* (n_batch, n_used, n_embd) weighted outputs per rank */
    void *mm_scratch; /* tensor_matmul scratch, model_moe_mm_scratch bytes at least */
} model_moe_bufs;

/* Allocates b for m's experts (nothing when m has none). 0 or STRATA_ENOMEM. */
int model_moe_bufs_init(model_moe_bufs *b, const model *m, int64_t n_batch);
void model_moe_bufs_free(model_moe_bufs *b);

/* out = the routed FFN of the n rows of xn (n <= n_batch). Errors: those of
 * tensor_matmul, naming the tensor. */
int model_moe_ffn(strata_pool *pool, const model_hparams *hp, const model_layer *l,
                  const float *xn, int64_t n, float *out, model_moe_bufs *b, strata_err *err);

#endif
