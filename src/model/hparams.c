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

typedef struct arch_desc {
    const char *name;
    enum model_arch arch;
    int rope_mode;
    bool qkv_bias;
    bool qk_norm;
} arch_desc;

static const arch_desc g_archs[] = {
    {"llama", MODEL_ARCH_LLAMA, TENSOR_ROPE_NORMAL, false, false},
    {"qwen2", MODEL_ARCH_QWEN2, TENSOR_ROPE_NEOX, true, false},
    {"qwen3", MODEL_ARCH_QWEN3, TENSOR_ROPE_NEOX, false, true},
};

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
                              "architecture '%.*s' is not supported (llama, qwen2, qwen3 are)",
                              (int)(a.len > 64 ? 64 : a.len), a.ptr);
    }
    const char *arch = d->name;
    hp->arch = d->arch;
    hp->arch_name = d->name;
    hp->rope_mode = d->rope_mode;
    hp->has_qkv_bias = d->qkv_bias;
    hp->has_qk_norm = d->qk_norm;

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
    if (!is_none && !is_linear) {
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s = '%.*s': only none and linear rope scaling are supported", key,
                              (int)(type.len > 32 ? 32 : type.len), type.ptr);
    }
    if ((is_linear || (type.len == 0 && frc == 0)) && factor != 0 && factor != 1) {
        if (!(factor > 0 && factor < 1e6)) {
            return strata_err_set(err, STRATA_EFORMAT, "%s.rope.scaling.factor = %g is out of range",
                                  arch, factor);
        }
        hp->rope_freq_scale = (float)(1.0 / factor);
    }

    /* The vocabulary size as the tokenizer sees it; model_load replaces it
     * with token_embd's row count, which is what the logits have. */
    const gguf_value *tokens;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL) == 0) {
        hp->n_vocab = (int64_t)tokens->v.arr.n;
    }
    return 0;
}
