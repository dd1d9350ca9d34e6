/* Reading a model's hyper-parameters from GGUF metadata (see hparams.h).
 * Everything read from the file is checked here: sizes positive and within
 * limits that keep later products of them far from overflow, and the
 * relations the forward pass relies on (head counts divide, n_rot even and
 * within the head). */
#include "hparams.h"

#include "tensor/ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Large enough for any real model, small enough that products of a few of
 * them (n_ctx * n_embd * n_layer ...) stay far inside int64_t. */
#define HP_MAX_DIM (1LL << 24)

/* For messages: the architectures of g_archs. */
#define MODEL_ARCH_NAMES "llama, qwen2, qwen3, gemma3, gemma2, phi3, smollm3, mistral3, qwen3moe, gpt-oss"

/* What each architecture's graph fixes (the rest comes from keys). */
typedef struct arch_desc {
    const char *name;
    enum model_arch arch;
    int rope_mode;
    bool qkv_bias;
    bool qk_norm;
    bool post_norms;      /* gemma */
    bool fused;           /* phi3: attn_qkv and gate|up in ffn_up */
    enum model_ffn_act act;
    bool embd_scale;      /* gemma: x * sqrt(n_embd) */
    int64_t swa_pattern;  /* 0: the arch has no sliding window */
    int64_t no_rope_step;
} arch_desc;

static const arch_desc g_archs[] = {
    {"llama", MODEL_ARCH_LLAMA, TENSOR_ROPE_NORMAL, false, false, false, false, MODEL_FFN_SILU,
     false, 0, 0},
    {"qwen2", MODEL_ARCH_QWEN2, TENSOR_ROPE_NEOX, true, false, false, false, MODEL_FFN_SILU,
     false, 0, 0},
    {"qwen3", MODEL_ARCH_QWEN3, TENSOR_ROPE_NEOX, false, true, false, false, MODEL_FFN_SILU,
     false, 0, 0},
    {"gemma3", MODEL_ARCH_GEMMA3, TENSOR_ROPE_NEOX, false, true, true, false, MODEL_FFN_GELU,
     true, 6, 0},
    {"gemma2", MODEL_ARCH_GEMMA2, TENSOR_ROPE_NEOX, false, false, true, false, MODEL_FFN_GELU,
     true, 2, 0},
    {"phi3", MODEL_ARCH_PHI3, TENSOR_ROPE_NEOX, false, false, false, true, MODEL_FFN_SILU, false,
     0, 0},
    {"smollm3", MODEL_ARCH_SMOLLM3, TENSOR_ROPE_NORMAL, false, false, false, false,
     MODEL_FFN_SILU, false, 0, 4},
    {"mistral3", MODEL_ARCH_MISTRAL3, TENSOR_ROPE_NORMAL, false, false, false, false,
     MODEL_FFN_SILU, false, 0, 0},
    {"qwen3moe", MODEL_ARCH_QWEN3MOE, TENSOR_ROPE_NEOX, false, true, false, false, MODEL_FFN_SILU,
     false, 0, 0},
    {"gpt-oss", MODEL_ARCH_GPTOSS, TENSOR_ROPE_NEOX, true, false, false, false,
     MODEL_FFN_SWIGLU_OAI, false, 2, 0},
};

bool model_hparams_layer_swa(const model_hparams *hp, int64_t il)
{
    return hp->n_swa > 0 && hp->swa_pattern > 0 && il % hp->swa_pattern < hp->swa_pattern - 1;
}

bool model_hparams_layer_rope(const model_hparams *hp, int64_t il)
{
    return hp->no_rope_step <= 0 || (il + 1) % hp->no_rope_step != 0;
}

void model_hparams_describe(const model_hparams *hp, char *buf, size_t n)
{
    size_t off = 0;
#define PUT(...)                                                                  \
    do {                                                                          \
        if (off < n) off += (size_t)snprintf(buf + off, n - off, __VA_ARGS__);    \
    } while (0)
    PUT("%s: %s FFN", hp->arch_name,
        hp->ffn_act == MODEL_FFN_GELU          ? "GeGLU (tanh)"
        : hp->ffn_act == MODEL_FFN_SWIGLU_OAI ? "clamped SwiGLU (gpt-oss)"
                                               : "SwiGLU");
    PUT(", %s rope", hp->rope_mode == TENSOR_ROPE_NEOX ? "NEOX" : "normal");
    PUT(" base %g", hp->rope_freq_base);
    if (hp->rope_yarn) {
        PUT(" with YaRN (x%g from %lld positions)", 1.0 / hp->rope_freq_scale,
            (long long)hp->n_ctx_orig);
    } else if (hp->rope_freq_scale != 1.0f) {
        PUT(" with linear scaling x%g", 1.0 / hp->rope_freq_scale);
    }
    if (hp->rope_longrope)
        PUT(" with LongRoPE factors (the long set past %lld positions)",
            (long long)hp->n_ctx_orig_factors);
    if (hp->rope_attn_factor != 1.0f) PUT(", cos/sin x%g", hp->rope_attn_factor);
    if (hp->no_rope_step > 0)
        PUT(" (none in 1 of every %lld layers)", (long long)hp->no_rope_step);
    if (hp->n_expert > 0)
        PUT(", %lld of %lld experts of FFN %lld per token", (long long)hp->n_expert_used,
            (long long)hp->n_expert, (long long)hp->n_ff_exp);
    if (hp->fused_qkv) PUT(", fused QKV and gate/up");
    if (hp->has_qkv_bias) PUT(", q/k/v biases");
    if (hp->has_qk_norm) PUT(", q/k norms");
    if (hp->has_post_norms) PUT(", post-norms");
    if (hp->embd_scale != 1.0f) PUT(", embeddings x%g", hp->embd_scale);
    if (hp->n_swa > 0) {
        int64_t n_sl = 0;
        for (int64_t il = 0; il < hp->n_layer; il++) n_sl += model_hparams_layer_swa(hp, il);
        PUT(", window %lld on %lld of %lld layers (rope base %g there)", (long long)hp->n_swa,
            (long long)n_sl, (long long)hp->n_layer, hp->rope_freq_base_swa);
    }
    if (hp->attn_softcap > 0) PUT(", attention soft-cap %g", hp->attn_softcap);
    if (hp->final_softcap > 0) PUT(", logit soft-cap %g", hp->final_softcap);
    if (hp->attn_temp_scale != 0) PUT(", query temperature %g", hp->attn_temp_scale);
#undef PUT
}

static void arch_key(char *key, size_t n, const char *arch, const char *suffix)
{
    snprintf(key, n, "%s.%s", arch, suffix);
}

/* Reads "{arch}.{suffix}" as an integer. A per-layer array is accepted when
 * all its n_layer elements are equal. Returns 0, STRATA_ENOTFOUND when
 * absent (err untouched), or an error naming the key. */
static int read_int(const gguf *g, const char *arch, const char *suffix, int64_t n_layer,
                    int64_t *out, strata_err *err)
{
    char key[128];
    arch_key(key, sizeof(key), arch, suffix);
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (kv == NULL) return STRATA_ENOTFOUND;
    if (kv->value.type == GGUF_VTYPE_ARRAY) {
        const gguf_value *arr = &kv->value;
        if (!gguf_vtype_is_int(arr->v.arr.elem_type) || arr->v.arr.n == 0) {
            return strata_err_set(err, STRATA_EFORMAT, "%s: an array, but not of integers", key);
        }
        if (n_layer > 0 && arr->v.arr.n != (uint64_t)n_layer) {
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s: %llu per-layer values for %lld layers", key,
                                  (unsigned long long)arr->v.arr.n, (long long)n_layer);
        }
        int64_t first = gguf_arr_int(arr, 0);
        for (uint64_t i = 1; i < arr->v.arr.n; i++) {
            if (gguf_arr_int(arr, i) != first) {
                return strata_err_set(err, STRATA_EUNSUPPORTED,
                                      "%s: layers with different values (%lld in layer 0, "
                                      "%lld in layer %llu) are not supported",
                                      key, (long long)first, (long long)gguf_arr_int(arr, i),
                                      (unsigned long long)i);
            }
        }
        *out = first;
        return 0;
    }
    return gguf_get_int(g, key, out, err);
}

static int read_size(const gguf *g, const char *arch, const char *suffix, int64_t n_layer,
                     bool required, int64_t dflt, int64_t *out, strata_err *err)
{
    int rc = read_int(g, arch, suffix, n_layer, out, err);
    if (rc == STRATA_ENOTFOUND) {
        if (required) {
            return strata_err_set(err, STRATA_EFORMAT, "missing metadata key %s.%s", arch,
                                  suffix);
        }
        *out = dflt;
        return 0;
    }
    if (rc != 0) return rc;
    if (*out <= 0 || *out > HP_MAX_DIM) {
        return strata_err_set(err, STRATA_EFORMAT, "%s.%s = %lld is out of range (1..%lld)",
                              arch, suffix, (long long)*out, (long long)HP_MAX_DIM);
    }
    return 0;
}

static int read_float(const gguf *g, const char *arch, const char *suffix, double *out,
                      strata_err *err)
{
    char key[128];
    arch_key(key, sizeof(key), arch, suffix);
    return gguf_get_float(g, key, out, err);
}

/* Reads an optional float key "{arch}.{suffix}" into *out (left alone when
 * absent), checking lo < value < hi. */
static int opt_float(const gguf *g, const char *arch, const char *suffix, double lo, double hi,
                     float *out, strata_err *err)
{
    double v;
    int rc = read_float(g, arch, suffix, &v, err);
    if (rc == STRATA_ENOTFOUND) return 0;
    if (rc != 0) return rc;
    if (!(v > lo && v < hi)) {
        return strata_err_set(err, STRATA_EFORMAT, "%s.%s = %g is out of range", arch, suffix, v);
    }
    *out = (float)v;
    return 0;
}

/* YaRN's keys. The cos/sin multiplier (Hugging Face's attention factor,
 * which llama.cpp applies): YaRN's own mscale(factor, 1), or, when a log
 * multiplier (mscale_all_dim) is given, mscale(factor, 1) /
 * mscale(factor, log_mul), with mscale(s, m) = 1 + 0.1 m ln(s); so 1 for
 * Mistral 3's log multiplier of 1 (checked against the golden logits: the
 * plain 1 + 0.1 ln(16) there moves them by 1.5). */
static int opt_float_keys(const gguf *g, const char *arch, model_hparams *hp, strata_err *err)
{
    int64_t orig = 0;
    int rc = read_size(g, arch, "rope.scaling.original_context_length", 0, false,
                       hp->n_ctx_train > 0 ? hp->n_ctx_train : 0, &orig, err);
    if (rc != 0) return rc;
    if (orig <= 0) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s: yarn rope scaling without "
                              "rope.scaling.original_context_length or context_length",
                              arch);
    }
    hp->rope_yarn = true;
    hp->n_ctx_orig = orig;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    float log_mul = 0.0f;
    rc = opt_float(g, arch, "rope.scaling.yarn_beta_fast", 0, 1e6, &hp->yarn_beta_fast, err);
    if (rc == 0)
        rc = opt_float(g, arch, "rope.scaling.yarn_beta_slow", 0, 1e6, &hp->yarn_beta_slow, err);
    if (rc == 0)
        rc = opt_float(g, arch, "rope.scaling.yarn_log_multiplier", -1e3, 1e3, &log_mul, err);
    if (rc != 0) return rc;
    const double ln_s = log(1.0 / (double)hp->rope_freq_scale);
    hp->yarn_mscale = log_mul != 0.0f
                          ? (float)((1.0 + 0.1 * ln_s) / (1.0 + 0.1 * (double)log_mul * ln_s))
                          : (float)(1.0 + 0.1 * ln_s);
    return 0;
}

/* The keys of the gemma graphs, the attention scale and the query
 * temperature. llama.cpp's defaults where keys are absent: gemma2's
 * window 4096 and soft-caps 50 / 30; gemma3's window pattern 6 and
 * sliding rope base 10000. */
static int read_gemma_keys(const gguf *g, const char *arch, const arch_desc *d,
                           model_hparams *hp, strata_err *err)
{
    int rc = 0;
    hp->embd_scale = d->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    /* Gemma 2 27B and Gemma 3 27B (46 and 62 layers) scale by
     * query_pre_attn_scalar = n_embd / n_head instead of the head size;
     * their files carry no key for it, and llama.cpp keys it on the layer
     * count as here */
    if ((d->arch == MODEL_ARCH_GEMMA2 && hp->n_layer == 46) ||
        (d->arch == MODEL_ARCH_GEMMA3 && hp->n_layer == 62))
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    rc = opt_float(g, arch, "attention.scale", 0, 1e6, &hp->attn_scale, err);
    if (rc != 0) return rc;
    hp->rope_freq_base_swa = d->arch == MODEL_ARCH_GEMMA3 ? 10000.0f : hp->rope_freq_base;
    hp->rope_freq_scale_swa = d->arch == MODEL_ARCH_GEMMA3 ? 1.0f : hp->rope_freq_scale;
    if (d->swa_pattern > 0) {
        hp->swa_pattern = d->swa_pattern;
        hp->n_swa = d->arch == MODEL_ARCH_GEMMA2 ? 4096 : 0;
        rc = read_size(g, arch, "attention.sliding_window", 0, false, hp->n_swa, &hp->n_swa, err);
        if (rc == 0 && d->arch == MODEL_ARCH_GEMMA3)
            rc = read_size(g, arch, "attention.sliding_window_pattern", 0, false, hp->swa_pattern,
                           &hp->swa_pattern, err);
        if (rc == 0)
            rc = opt_float(g, arch, "rope.freq_base_swa", 1, 1e12, &hp->rope_freq_base_swa, err);
        if (rc != 0) return rc;
    }
    if (d->arch == MODEL_ARCH_GEMMA2) {
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
        rc = opt_float(g, arch, "attn_logit_softcapping", 0, 1e9, &hp->attn_softcap, err);
        if (rc == 0)
            rc = opt_float(g, arch, "final_logit_softcapping", 0, 1e9, &hp->final_softcap, err);
        if (rc != 0) return rc;
    }
    if (d->arch == MODEL_ARCH_GEMMA3) {
        /* none unless the file says (Gemma 3's configs have none) */
        rc = opt_float(g, arch, "final_logit_softcapping", 0, 1e9, &hp->final_softcap, err);
        if (rc != 0) return rc;
    }
    rc = opt_float(g, arch, "attention.temperature_scale", -1e3, 1e3, &hp->attn_temp_scale, err);
    if (rc != 0) return rc;
    if (hp->attn_temp_scale != 0.0f) {
        hp->attn_temp_floor = hp->n_ctx_orig > 0 ? hp->n_ctx_orig : hp->n_ctx_train;
        if (hp->attn_temp_floor <= 0) {
            return strata_err_set(err, STRATA_EFORMAT,
                                  "%s.attention.temperature_scale without an original context "
                                  "length",
                                  arch);
        }
    }
    return 0;
}

int model_hparams_load(const gguf *g, model_hparams *hp, strata_err *err)
{
    memset(hp, 0, sizeof(*hp));
    gguf_str a = gguf_arch(g);
    const arch_desc *d = NULL;
    for (size_t i = 0; i < sizeof(g_archs) / sizeof(g_archs[0]); i++) {
        if (a.len == strlen(g_archs[i].name) && memcmp(a.ptr, g_archs[i].name, a.len) == 0) {
            d = &g_archs[i];
        }
    }
    if (d == NULL) {
        if (a.len == 0) {
            return strata_err_set(err, STRATA_EFORMAT, "missing metadata key general.architecture");
        }
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "architecture '%.*s' is not supported (%s are)",
                              (int)(a.len > 64 ? 64 : a.len), a.ptr, MODEL_ARCH_NAMES);
    }
    const char *arch = d->name;
    hp->arch = d->arch;
    hp->arch_name = d->name;
    hp->rope_mode = d->rope_mode;
    hp->has_qkv_bias = d->qkv_bias;
    hp->has_qk_norm = d->qk_norm;
    hp->has_post_norms = d->post_norms;
    hp->fused_qkv = d->fused;
    hp->fused_gate_up = d->fused;
    hp->ffn_act = d->act;
    hp->no_rope_step = d->no_rope_step;

    int rc = 0;
    if (rc == 0) rc = read_size(g, arch, "block_count", 0, true, 0, &hp->n_layer, err);
    if (rc == 0) rc = read_size(g, arch, "embedding_length", 0, true, 0, &hp->n_embd, err);
    if (rc == 0)
        rc = read_size(g, arch, "feed_forward_length", hp->n_layer, true, 0, &hp->n_ff, err);
    if (rc == 0)
        rc = read_size(g, arch, "attention.head_count", hp->n_layer, true, 0, &hp->n_head, err);
    if (rc == 0)
        rc = read_size(g, arch, "attention.head_count_kv", hp->n_layer, false, hp->n_head,
                       &hp->n_head_kv, err);
    if (rc != 0) return rc;
    /* experts: required for qwen3moe; llama in Mixtral's layout when
     * expert_count is present */
    const bool moe_req = d->arch == MODEL_ARCH_QWEN3MOE || d->arch == MODEL_ARCH_GPTOSS;
    hp->moe_softmax_chosen = d->arch == MODEL_ARCH_GPTOSS;
    hp->ffn_norm_post_attn = d->arch == MODEL_ARCH_GPTOSS;
    if (rc == 0 && (moe_req || d->arch == MODEL_ARCH_LLAMA)) {
        rc = read_size(g, arch, "expert_count", 0, moe_req, 0, &hp->n_expert, err);
        if (rc == 0 && hp->n_expert > 0)
            rc = read_size(g, arch, "expert_used_count", 0, true, 0, &hp->n_expert_used, err);
        if (rc == 0)
            rc = read_size(g, arch, "expert_feed_forward_length", hp->n_layer, false, hp->n_ff,
                           &hp->n_ff_exp, err);
        if (rc == 0 && (hp->n_expert > 4096 || hp->n_expert_used > hp->n_expert)) {
            rc = strata_err_set(err, STRATA_EFORMAT,
                                "%s: %lld experts used of %lld (at most 4096, and used <= count)",
                                arch, (long long)hp->n_expert_used, (long long)hp->n_expert);
        }
    }
    if (rc != 0) return rc;
    if (hp->n_head % hp->n_head_kv != 0) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s.attention.head_count %lld is not a multiple of head_count_kv "
                              "%lld",
                              arch, (long long)hp->n_head, (long long)hp->n_head_kv);
    }
    int64_t dflt_head = hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    rc = read_size(g, arch, "attention.key_length", hp->n_layer, false, dflt_head, &hp->head_dim,
                   err);
    if (rc == 0)
        rc = read_size(g, arch, "attention.value_length", hp->n_layer, false, hp->head_dim,
                       &hp->head_dim_v, err);
    if (rc != 0) return rc;
    if (hp->head_dim == 0) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s.embedding_length %lld does not divide by head_count %lld and "
                              "there is no %s.attention.key_length",
                              arch, (long long)hp->n_embd, (long long)hp->n_head, arch);
    }
    rc = read_size(g, arch, "rope.dimension_count", 0, false, hp->head_dim, &hp->n_rot, err);
    if (rc != 0) return rc;
    if (hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s.rope.dimension_count %lld must be even and at most the head "
                              "size %lld",
                              arch, (long long)hp->n_rot, (long long)hp->head_dim);
    }

    int64_t ctx = 0;
    rc = read_int(g, arch, "context_length", 0, &ctx, err);
    if (rc == STRATA_ENOTFOUND) ctx = 0;
    else if (rc != 0) return rc;
    hp->n_ctx_train = ctx > 0 ? ctx : 0;

    double v;
    rc = read_float(g, arch, "attention.layer_norm_rms_epsilon", &v, err);
    if (rc == STRATA_ENOTFOUND) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "missing metadata key %s.attention.layer_norm_rms_epsilon", arch);
    }
    if (rc != 0) return rc;
    if (!(v > 0 && v < 1)) {
        return strata_err_set(err, STRATA_EFORMAT,
                              "%s.attention.layer_norm_rms_epsilon = %g is out of range", arch, v);
    }
    hp->rms_eps = (float)v;

    hp->rope_freq_base = 10000.0f;
    rc = read_float(g, arch, "rope.freq_base", &v, err);
    if (rc == 0) {
        if (!(v > 1 && v < 1e12)) {
            return strata_err_set(err, STRATA_EFORMAT, "%s.rope.freq_base = %g is out of range",
                                  arch, v);
        }
        hp->rope_freq_base = (float)v;
    } else if (rc != STRATA_ENOTFOUND) {
        return rc;
    }

    /* Rope scaling. Llama 3's long-context scaling arrives as the
     * rope_freqs.weight tensor (bound by model_load), not as a key. */
    hp->rope_freq_scale = 1.0f;
    char key[128];
    arch_key(key, sizeof(key), arch, "rope.scaling.type");
    gguf_str type = {"", 0};
    rc = gguf_get_str(g, key, &type, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) return rc;
    double factor = 0;
    int frc = read_float(g, arch, "rope.scaling.factor", &factor, err);
    if (frc == STRATA_ENOTFOUND) {
        /* the key older converters wrote for linear scaling */
        frc = read_float(g, arch, "rope.scale_linear", &factor, err);
    }
    if (frc != 0 && frc != STRATA_ENOTFOUND) return frc;
    bool is_none = type.len == 0 || (type.len == 4 && memcmp(type.ptr, "none", 4) == 0);
    bool is_linear = type.len == 6 && memcmp(type.ptr, "linear", 6) == 0;
    bool is_yarn = type.len == 4 && memcmp(type.ptr, "yarn", 4) == 0;
    /* "longrope" names Phi-3's scheme, whose factors come as tensors
     * (model.c) and whose angles are otherwise scaled linearly */
    if (type.len == 8 && memcmp(type.ptr, "longrope", 8) == 0) is_linear = true;
    if (!is_none && !is_linear && !is_yarn) {
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s = '%.*s': only none, linear, longrope and yarn rope scaling are "
                              "supported",
                              key, (int)(type.len > 32 ? 32 : type.len), type.ptr);
    }
    if ((is_linear || is_yarn || (type.len == 0 && frc == 0)) && factor != 0 && factor != 1) {
        if (!(factor > 0 && factor < 1e6)) {
            return strata_err_set(err, STRATA_EFORMAT, "%s.rope.scaling.factor = %g is out of range",
                                  arch, factor);
        }
        hp->rope_freq_scale = (float)(1.0 / factor);
    }
    if (is_yarn && hp->rope_freq_scale != 1.0f) {
        rc = opt_float_keys(g, arch, hp, err);
        if (rc != 0) return rc;
    }
    hp->rope_attn_factor = 1.0f;
    rc = opt_float(g, arch, "rope.scaling.attn_factor", 0, 1e3, &hp->rope_attn_factor, err);
    if (rc != 0) return rc;
    if (hp->rope_yarn) hp->yarn_mscale *= hp->rope_attn_factor;
    rc = read_size(g, arch, "rope.scaling.original_context_length", 0, false, hp->n_ctx_train,
                   &hp->n_ctx_orig_factors, err);
    if (rc != 0) return rc;
    hp->rope_longrope = gguf_find_tensor(g, "rope_factors_long.weight") != NULL ||
                        gguf_find_tensor(g, "rope_factors_short.weight") != NULL;

    rc = read_gemma_keys(g, arch, d, hp, err);
    if (rc != 0) return rc;

    /* The vocabulary size as the tokenizer sees it; model_load replaces it
     * with token_embd's row count, which is what the logits have. */
    const gguf_value *tokens;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL) == 0) {
        hp->n_vocab = (int64_t)tokens->v.arr.n;
    }
    return 0;
}
