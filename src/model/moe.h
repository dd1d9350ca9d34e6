/* Mixture-of-experts feed-forward (qwen3moe): binding the expert tensors and
 * running the routed FFN over a chunk of tokens.
 *
 * Per token, with h = rmsnorm(x) * ffn_norm:
 *     p = softmax(h Wr^T)                     (n_expert router probabilities)
 *     E = the n_used largest p (lowest index first on ties), w_k = p_k / sum_E p
 *     out = sum_k w_k · W2_k · (silu(W1_k·h) ⊙ W3_k·h)   (k in rank order)
 * The experts run once each over all the chunk's tokens that chose them.
 * Each token's input row is quantized once into the experts' activation
 * format and copied into one "slot" per (token, rank), slots grouped by
 * expert; then the gate and up products of every chosen expert go to the
 * pool as one tensor_matmul_tasks call (matmul_tasks.h), the activations
 * (quantized again for down) as one row-wise job, and the down products as
 * a second call. A decode step thus wakes the pool about four times per
 * layer, not three times per expert, and reads only the chosen experts'
 * rows; a prefill chunk reads each chosen expert once for all its tokens.
 * Each token's result is kept per rank and summed in the token's own rank
 * order whatever else is in the batch (the products compute rows
 * independently, with the bits tensor_matmul gives): batch invariance
 * holds, across thread counts and chunk sizes.
 *
 * The expert tensors are 3-D, ne = [n_cols, n_rows, n_expert]; expert e's
 * matrix is the e-th slab of n_rows rows. The loader repacks each slab
 * into the x8 layout where its type has one (pack.h), as for dense
 * matrices; model_moe_unify then keeps one layout per tensor. */
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

/* The most experts a layer may have (hparams.c checks it). */
#define MODEL_MOE_MAX_EXPERTS 4096

/* After the loader repacked the experts of layer il: a tensor some of whose
 * experts could not be repacked (data the x8 layout does not take) goes
 * back to the file's layout for all its experts, so that one activation
 * format serves each tensor. Errors: those of binding. */
int model_moe_unify(const gguf *g, const model_hparams *hp, int64_t il, model_layer *l,
                    strata_err *err);

/* What a decode step does not read of m's experts: per layer, the
 * n_expert - n_used experts a token does not choose, as bytes of the file's
 * expert tensors (*bytes) and parameters (*params); 0 for dense models. A
 * step's weight traffic is then the file's tensor bytes less these (and
 * less the embedding table), whichever experts it picks. */
void model_moe_inactive(const model *m, uint64_t *bytes, uint64_t *params);

/* Scratch of model_moe_ffn for chunks of up to n_batch tokens; a slot is
 * one (token, rank) pair, n_slots = n_batch * n_used. */
typedef struct model_moe_bufs {
    float *probs;     /* (n_batch, n_expert) router output */
    int32_t *sel;     /* (n_batch, n_used) chosen experts, rank order */
    float *wsel;      /* (n_batch, n_used) their weights */
    int32_t *exp_off; /* (n_expert + 1) each expert's first slot */
    int32_t *slot_exp; /* (n_slots) its expert */
    int32_t *slot_of; /* (n_batch, n_used) the slot of (token, rank) */
    void *xg_gate;    /* (n_slots) input rows in gate's activation format */
    void *xg_up;      /* (n_slots) ... in up's, when it differs */
    void *xd;         /* (n_slots) activations in down's format */
    float *gate;      /* (n_slots, n_ff_exp) */
    float *up;        /* (n_slots, n_ff_exp) */
    float *yg;        /* (n_slots, n_embd) down's outputs */
    struct tensor_mm_task *tasks; /* (2 n_expert) */
    void *mm_scratch; /* the router's tensor_matmul scratch */
    size_t slot_buf_bytes[6]; /* bytes of xg_gate, xg_up, xd, gate, up, yg */
} model_moe_bufs;

/* Allocates b for m's experts (nothing when m has none). 0 or STRATA_ENOMEM. */
int model_moe_bufs_init(model_moe_bufs *b, const model *m, int64_t n_batch);
void model_moe_bufs_free(model_moe_bufs *b);

/* Gives the pages of b's per-slot buffers (most of its memory) back to
 * the operating system, as model_ctx_release_scratch does for the step
 * buffers: they hold nothing between calls. Not while a step runs. */
void model_moe_bufs_release(model_moe_bufs *b);

/* out = the routed FFN of the n rows of xn (n <= n_batch). Errors: those of
 * tensor_matmul, naming the tensor. */
int model_moe_ffn(strata_pool *pool, const model_hparams *hp, const model_layer *l,
                  const float *xn, int64_t n, float *out, model_moe_bufs *b, strata_err *err);

#endif
