/* The hyper-parameters of a model, read from a GGUF file's metadata by the
 * architecture's key prefix ("llama.embedding_length", ...).
 *
 * Architectures: `llama` (Llama 1/2/3 including Llama 3's rope frequency
 * factors, Mistral, TinyLlama, SmolLM: they share one graph), `qwen2` (the
 * llama graph with q/k/v biases, NEOX rope), `qwen3` (per-head RMS norms
 * on q and k, NEOX rope), `gemma3` (q/k norms, post-norms, GeGLU, scaled
 * embeddings, sliding-window layers with their own rope base), `gemma2`
 * (gemma3 without q/k norms, with soft-capped attention scores and
 * logits), `phi3` (fused QKV and gate/up matrices), `smollm3` (no rope on
 * every 4th layer), `mistral3` (YaRN rope, query temperature) and
 * `qwen3moe` (qwen3 with a routed mixture-of-experts FFN: model/moe.h) and
 * `gpt-oss` (biases everywhere, attention sinks, a window on even layers,
 * a biased router and clamped SwiGLU experts). What differs between them is data in
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
#include <stddef.h>
#include <stdint.h>

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_QWEN3 = 2,
    MODEL_ARCH_GEMMA3 = 3,
    MODEL_ARCH_GEMMA2 = 4,
    MODEL_ARCH_PHI3 = 5,
    MODEL_ARCH_SMOLLM3 = 6,
    MODEL_ARCH_MISTRAL3 = 7,
    MODEL_ARCH_QWEN3MOE = 8,
    MODEL_ARCH_GPTOSS = 9,
};

/* The feed-forward's gate activation: out = W2 · (act(W1·h) ⊙ W3·h). */
enum model_ffn_act {
    MODEL_FFN_SILU = 0, /* SwiGLU: llama, qwen, phi3, smollm3, mistral3 */
    MODEL_FFN_GELU = 1, /* GeGLU with GELU's tanh form: gemma2, gemma3 */
    MODEL_FFN_SWIGLU_OAI = 2, /* gpt-oss's experts: g = min(gate, 7), u = clamp(up, -7, 7),
                                 g sigmoid(1.702 g) (u + 1) */
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
    int64_t n_expert;       /* {arch}.expert_count: 0 for dense models (qwen3moe, and llama
                               in Mixtral's layout: routed FFN) */
    int64_t n_expert_used;  /* {arch}.expert_used_count */
    int64_t n_ff_exp;       /* {arch}.expert_feed_forward_length (else n_ff) */
    bool moe_softmax_chosen; /* gpt-oss: the n_used largest router logits, then a softmax
                                over them; else a softmax over all, then the n_used largest
                                renormalised */
    bool ffn_norm_post_attn; /* gpt-oss: the FFN's norm is named post_attention_norm */
    int64_t head_dim;       /* {arch}.attention.key_length (q and k per head) */
    int64_t head_dim_v;     /* {arch}.attention.value_length */
    int64_t n_rot;          /* {arch}.rope.dimension_count: dims rotated per head */

    float rms_eps;          /* {arch}.attention.layer_norm_rms_epsilon */
    float rope_freq_base;   /* {arch}.rope.freq_base */
    float rope_freq_scale;  /* 1 / rope.scaling.factor for linear scaling, else 1 */
    int rope_mode;          /* TENSOR_ROPE_NORMAL (llama) or TENSOR_ROPE_NEOX (qwen) */

    bool has_qkv_bias;      /* qwen2: attn_{q,k,v}.bias */
    bool has_qk_norm;       /* qwen3, gemma3: attn_{q,k}_norm.weight, (head_dim) each */
    bool has_post_norms;    /* gemma2/3: post_attention_norm and post_ffw_norm, (n_embd),
                               applied to each sub-block's output before the residual add */
    bool fused_qkv;         /* phi3: attn_qkv.weight holds Wq, Wk, Wv stacked by rows */
    bool fused_gate_up;     /* phi3: ffn_up.weight holds Wgate then Wup (2 n_ff rows) */
    enum model_ffn_act ffn_act;

    float embd_scale;       /* x = token_embd[token] * embd_scale: sqrt(n_embd) for gemma, else 1 */
    float attn_scale;       /* scores = attn_scale * q.k: {arch}.attention.scale, else
                               1 / sqrt(head_dim) */
    float attn_softcap;     /* > 0: scores -> c tanh(scores / c) after the scale (gemma2) */
    float final_softcap;    /* > 0: logits -> c tanh(logits / c) (gemma2) */

    /* Sliding-window attention: a token at p of a sliding layer sees the
     * positions p - n_swa + 1 .. p. Layer il slides when n_swa > 0 and
     * il % swa_pattern < swa_pattern - 1 (gemma3: {arch}.attention.
     * sliding_window_pattern, default 6: five sliding layers, then one
     * global; gemma2: 2, the even layers). */
    int64_t n_swa;          /* {arch}.attention.sliding_window; 0: none */
    int64_t swa_pattern;
    float rope_freq_base_swa; /* sliding layers' rope base: rope.freq_base_swa, else 10000
                                 for gemma3 (as real files expect), else rope.freq_base */
    float rope_freq_scale_swa; /* sliding layers' linear rope scale: 1 for gemma3 (its
                                  rope.scaling applies to the global layers only, as in
                                  Gemma 3 4B-27B), else rope_freq_scale */
    int64_t no_rope_step;   /* > 0: layers il with (il + 1) % step == 0 have no rope
                               (smollm3: every 4th) */

    /* YaRN rope scaling (rope.scaling.type yarn): dims whose wavelength is
     * short against the original context keep their frequency, long ones
     * are interpolated by rope_freq_scale, with a linear ramp between
     * (correction dims from beta_fast / beta_slow), and cos/sin scaled by
     * yarn_mscale. */
    bool rope_yarn;
    int64_t n_ctx_orig;     /* rope.scaling.original_context_length */
    float yarn_beta_fast;   /* rope.scaling.yarn_beta_fast, default 32 */
    float yarn_beta_slow;   /* rope.scaling.yarn_beta_slow, default 1 */
    float yarn_mscale;      /* the cos/sin multiplier (see hparams.c) */
    /* Llama-4 style query temperature (mistral3): q at position p times
     * 1 + attn_temp_scale * ln(floor(p / attn_temp_floor) + 1). */
    float attn_temp_scale;  /* {arch}.attention.temperature_scale; 0: none */
    int64_t attn_temp_floor; /* n_ctx_orig */

    /* Every file may scale rope's cos and sin (and so q and k) by
     * {arch}.rope.scaling.attn_factor (default 1): Phi-3's LongRoPE files
     * carry sqrt(1 + ln(s) / ln(n_orig)) for s = context_length / n_orig.
     * With YaRN it multiplies yarn_mscale. */
    float rope_attn_factor;
    /* LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): rope_factors_long.weight
     * and rope_factors_short.weight divide each pair's angle; the long set
     * applies when a sequence may grow past this many positions
     * ({arch}.rope.scaling.original_context_length, else context_length),
     * as llama.cpp chooses them by the context it runs with. */
    int64_t n_ctx_orig_factors;
    bool rope_longrope;     /* the file has either set of factors */
} model_hparams;

/* Whether layer il attends through a sliding window (see n_swa). */
bool model_hparams_layer_swa(const model_hparams *hp, int64_t il);

/* Whether layer il applies rope to q and k (see no_rope_step). */
bool model_hparams_layer_rope(const model_hparams *hp, int64_t il);

/* One line describing the graph the hyper-parameters select (for
 * `strata info`), e.g. "gemma3: GeGLU, q/k norms, post-norms, window 8 on
 * 5 of 6 layers, ...". Writes at most n bytes (NUL-terminated). */
void model_hparams_describe(const model_hparams *hp, char *buf, size_t n);

/* Reads g's hyper-parameters into *hp. Errors (with the key in err):
 * STRATA_EUNSUPPORTED for an architecture, rope scaling type or per-layer
 * layout this build has no graph for; STRATA_EFORMAT for a missing required
 * key, a value of the wrong type, or values that do not fit together
 * (head_count not dividing by head_count_kv, n_rot odd or above key_length,
 * non-positive sizes). */
int model_hparams_load(const gguf *g, model_hparams *hp, strata_err *err);

#endif
