/* The hyper-parameters of a model, read from a GGUF file's metadata by the
 * architecture's key prefix ("llama.embedding_length", ...).
 *
 * Architectures: `llama` (Llama 1/2/3 including Llama 3's rope frequency
 * factors, Mistral, TinyLlama, SmolLM: they share one graph), `qwen2` (the
 * llama graph with q/k/v biases, NEOX rope) and `qwen3` (per-head RMS norms
 * on q and k, NEOX rope). What differs between them is data in
 * model_hparams, so the forward pass has no per-architecture branches
 * beyond "is this tensor present".
 *
 * Defaults where the file has no key (as llama.cpp applies them):
 *   rope.freq_base 10000; head_count_kv = head_count;
 *   attention.key_length / value_length = embedding_length / head_count;
 *   rope.dimension_count = key_length; rope.scaling.type none.
 * Per-layer arrays (head counts, FFN width) are accepted when every layer
 * has the same value, and refused otherwise (no graph here for that). */
#ifndef STRATA_MODEL_HPARAMS_H
#define STRATA_MODEL_HPARAMS_H

#include "base/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_QWEN3 = 2,
};

typedef struct model_hparams {
    enum model_arch arch;
    const char *arch_name;  /* "llama", "qwen2", "qwen3" (static storage) */

    int64_t n_vocab;        /* rows of token_embd (filled by model_load; the
                               tokenizer's count when known at hparams time) */
    int64_t n_ctx_train;    /* {arch}.context_length; 0 when absent */
    int64_t n_embd;         /* {arch}.embedding_length */
    int64_t n_layer;        /* {arch}.block_count */
    int64_t n_head;         /* {arch}.attention.head_count */
    int64_t n_head_kv;      /* {arch}.attention.head_count_kv */
    int64_t n_ff;           /* {arch}.feed_forward_length */
    int64_t head_dim;       /* {arch}.attention.key_length (q and k per head) */
    int64_t head_dim_v;     /* {arch}.attention.value_length */
    int64_t n_rot;          /* {arch}.rope.dimension_count: dims rotated per head */

    float rms_eps;          /* {arch}.attention.layer_norm_rms_epsilon */
    float rope_freq_base;   /* {arch}.rope.freq_base */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for linear scaling, else 1 */
    int rope_mode;          /* TENSOR_ROPE_NORMAL (llama) or TENSOR_ROPE_NEOX (qwen) */

    bool has_qkv_bias;      /* qwen2: attn_{q,k,v}.bias */
    bool has_qk_norm;       /* qwen3: attn_{q,k}_norm.weight, (head_dim) each */
} model_hparams;

/* Reads g's hyper-parameters into *hp. Errors (with the key in err):
 * STRATA_EUNSUPPORTED for an architecture, rope scaling type or per-layer
 * layout this build has no graph for; STRATA_EFORMAT for a missing required
 * key, a value of the wrong type, or values that do not fit together
 * (head_count not dividing by head_count_kv, n_rot odd or above key_length,
 * non-positive sizes). */
int model_hparams_load(const gguf *g, model_hparams *hp, strata_err *err);

#endif
