/* Random-weight models of known shapes, written as ordinary GGUF files:
 * for tests (the `tiny` preset), and for benchmarks at real sizes
 * (`llama-1b`, `qwen-0.5b`, one shape of each other architecture, and the
 * mixtures of experts `moe-1b-7b`, `mixtral-8x1b` and `gpt-oss-20b`)
 * without downloading weights.
 *
 * Weights are seeded: the same preset, type and seed give the same bytes,
 * whatever the thread count: each row of each tensor draws from its own
 * stream (seed, tensor index, row). */
#ifndef STRATA_MODEL_MKMODEL_H
#define STRATA_MODEL_MKMODEL_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct model_preset {
    const char *name;
    const char *arch;    /* llama, qwen2, qwen3moe, gemma2, gemma3, phi3, smollm3, mistral3, gpt-oss */
    const char *about;   /* one line for --help */
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff;
    int64_t n_vocab;     /* with the built-in vocabulary; --vocab-from overrides */
    int64_t n_ctx_train;
    double rope_freq_base;
    double rms_eps;
    bool qkv_bias;       /* q/k/v projections carry biases (qwen2) */
    bool tied_output;    /* no output.weight: logits use token_embd */
    /* Zero for the llama shape; the gemma3, phi3 and MoE presets set them. */
    int64_t head_dim;    /* 0: n_embd / n_head */
    bool qk_norm;        /* attn_{q,k}_norm.weight, (head_dim) each (qwen3moe, gemma3) */
    bool post_norms;     /* post_attention_norm, post_ffw_norm (gemma3) */
    bool fused;          /* attn_qkv.weight, and ffn_up.weight = gate|up (phi3) */
    int64_t n_swa;       /* {arch}.attention.sliding_window; 0: none */
    int64_t swa_pattern; /* {arch}.attention.sliding_window_pattern (gemma3) */
    /* mixture of experts (qwen3moe): n_expert > 0 replaces the FFN by a
     * router and n_expert experts of FFN n_ff_exp, n_expert_used per token */
    int64_t n_expert, n_expert_used, n_ff_exp;
    /* gpt-oss: attn_output.bias, attn_sinks (a logit per head), the FFN's
     * norm named post_attention_norm, a router bias and expert biases */
    bool gpt_oss_tensors;
    /* YaRN rope scaling when yarn_factor > 0 (mistral3, gpt-oss): the
     * factor, the original context, yarn_log_multiplier (0: not written);
     * attn_temp_scale: attention.temperature_scale (0: not written) */
    double yarn_factor;
    int64_t yarn_orig_ctx;
    double yarn_log_mul, attn_temp_scale;
} model_preset;

/* The preset called name, or NULL. */
const model_preset *model_preset_find(const char *name);

/* All presets, *n of them. */
const model_preset *model_preset_list(size_t *n);

typedef struct model_make_opts {
    const model_preset *preset;
    uint32_t type;          /* type of the 2-D weight matrices (enum strata_type) */
    bool has_expert_type;   /* the expert tensors are expert_type, not type */
    uint32_t expert_type;
    const char *vocab_from; /* copy tokenizer.* from this GGUF; NULL: built-in bytes */
    uint64_t seed;
    const char *out_path;
    bool quiet;             /* no progress lines on stderr */
    int n_threads;          /* threads that draw and quantize (<= 0: one) */
} model_make_opts;

/* Writes the model. Matrices whose rows are not a whole number of the
 * type's blocks fall back to a type whose blocks fit (as other quantizers
 * do), and that is logged. Errors: STRATA_EINVAL for an unusable type,
 * STRATA_EIO for write failures, and the reader's errors for vocab_from. */
int model_make(const model_make_opts *o, strata_err *err);

#endif
