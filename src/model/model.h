/* A loaded model: its hyper-parameters and its weights, bound by their GGUF
 * names to pointers into the file's mapping. Matrices of a type with a
 * row-interleaved layout (tensor/pack.h) are repacked at load into one
 * allocation, their type or'ed with TENSOR_PACKED, for faster matrix
 * products; STRATA_REPACK=0 in the environment keeps every matrix in the
 * file's layout, in place (less memory, slower). Layouts larger than the
 * file's (the 1-3 bit IQ ones) are used only when model_repack_larger allows
 * them, or with STRATA_REPACK=1.
 *
 * Every tensor the graph uses is looked up and checked at load: present,
 * of a type the kernels take (matrices: tensor_matmul_supported with a row
 * length that is a whole number of blocks; norms, biases and rope factors:
 * F32), and of exactly the shape the hyper-parameters imply. A failure names
 * the tensor, the shape it has and the shape it should have.
 *
 * Fused matrices (phi3): attn_qkv.weight is bound as three row ranges wq,
 * wk, wv of the one tensor, ffn_up.weight (2 n_ff rows) as ffn_gate (the
 * first n_ff rows) and ffn_up (the rest); each range is a matrix of its
 * own to the kernels and to repacking.
 *
 * Output matrix: output.weight when present, else token_embd.weight (tied
 * embeddings, as Qwen2 and Llama 3.2 ship). */
#ifndef STRATA_MODEL_MODEL_H
#define STRATA_MODEL_MODEL_H

#include "base/err.h"
#include "gguf/gguf.h"
#include "model/hparams.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A weight matrix W of shape (n_rows, n_cols): row r holds the n_cols
 * weights of output r, in GGUF's block layout (GGUF's ne[0] = n_cols). */
typedef struct model_matrix {
    const void *data;  /* in the mapping (row_bytes * n_rows bytes), or packed */
    uint32_t type;     /* enum strata_type, | TENSOR_PACKED when repacked */
    int64_t n_rows;
    int64_t n_cols;
    size_t row_bytes;
    const char *name;  /* the tensor's name, for messages */
} model_matrix;

typedef struct model_layer {
    const float *attn_norm;   /* (n_embd) */
    model_matrix wq;          /* (n_head*head_dim, n_embd) */
    model_matrix wk;          /* (n_head_kv*head_dim, n_embd) */
    model_matrix wv;          /* (n_head_kv*head_dim_v, n_embd) */
    model_matrix wo;          /* (n_embd, n_head*head_dim_v) */
    const float *bq;          /* (n_head*head_dim) or NULL */
    const float *bk;          /* (n_head_kv*head_dim) or NULL */
    const float *bv;          /* (n_head_kv*head_dim_v) or NULL */
    const float *bo;          /* (n_embd) attn_output.bias or NULL */
    const float *sinks;       /* (n_head) attn_sinks.weight or NULL (gpt-oss) */
    const float *q_norm;      /* (head_dim) or NULL */
    const float *k_norm;      /* (head_dim) or NULL */
    const float *post_attn_norm; /* (n_embd) or NULL: gemma's norm of attention's output */
    const float *ffn_norm;    /* (n_embd) */
    const float *post_ffw_norm;  /* (n_embd) or NULL: gemma's norm of the FFN's output */
    model_matrix ffn_gate;    /* (n_ff, n_embd) */
    model_matrix ffn_up;      /* (n_ff, n_embd) */
    model_matrix ffn_down;    /* (n_embd, n_ff) */
    /* mixture of experts (hp.n_expert > 0; then ffn_gate/up/down are unset) */
    model_matrix ffn_gate_inp;    /* (n_expert, n_embd) the router */
    const float *ffn_gate_inp_b;  /* (n_expert) its bias, or NULL */
    const float *exp_gate_b;      /* (n_expert, n_ff_exp) expert biases, or NULL (gpt-oss) */
    const float *exp_up_b;        /* (n_expert, n_ff_exp) */
    const float *exp_down_b;      /* (n_expert, n_embd) */
    const model_matrix *experts;  /* (n_expert, 3): gate (n_ff_exp, n_embd), up (n_ff_exp,
                                     n_embd), down (n_embd, n_ff_exp) of each; or NULL */
} model_layer;

typedef struct model {
    gguf *g;                  /* the file; owned when opened with model_open */
    bool owns_gguf;
    model_hparams hp;
    model_matrix tok_embd;    /* (n_vocab, n_embd): rows are looked up, not multiplied */
    model_matrix output;      /* (n_vocab, n_embd); token_embd when tied */
    bool tied_output;
    const float *output_norm; /* (n_embd) */
    const float *rope_freqs;  /* (n_rot/2) Llama 3 frequency factors, or NULL */
    const float *rope_long;   /* (n_rot/2) LongRoPE's factors past hp.n_ctx_orig_factors */
    const float *rope_short;  /* (n_rot/2) ... within it; either may be NULL (plain rope) */
    model_layer *layers;      /* (n_layer) */
    model_matrix *expert_slots; /* (n_layer, n_expert, 3) what layers[].experts point into */
    char *packed;             /* the repacked matrices (a mapping), or NULL */
    size_t packed_map;        /* its length */
    size_t packed_bytes;      /* bytes of weights repacked */
} model;

/* Opens the GGUF at path and loads it. On success *out is owned by the
 * caller and freed with model_close (which closes the file). Errors: those
 * of gguf_open, model_hparams_load, and load errors naming the tensor. */
int model_open(model **out, const char *path, strata_err *err);

/* Loads from an open file, which must outlive the model (it is borrowed:
 * model_close leaves it open). */
int model_load(model **out, gguf *g, strata_err *err);

/* Frees the model (and the file when model_open opened it). NULL is allowed. */
void model_close(model *m);

/* Whether layouts larger than the file's may take `extra` bytes beyond a
 * model of `model_bytes` in its file's layout, with `available` bytes of
 * memory available (SIZE_MAX: unknown, allowed): when extra is at most half
 * of what is available beyond the model, the rest being left to the KV
 * cache and everything else. */
bool model_repack_larger(size_t extra, size_t model_bytes, size_t available);

#endif
