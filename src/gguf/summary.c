/* Model facts for display (see summary.h). */
#include "summary.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Reads "{arch}.{suffix}" as an integer; an array of integers (per-layer
 * values) gives its largest element. */
static int64_t arch_int(const gguf *g, gguf_str arch, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof(key), "%.*s.%s", (int)arch.len, arch.ptr, suffix);
    int64_t v;
    if (gguf_get_int(g, key, &v, NULL) == 0) return v;
    const gguf_value *arr;
    if (gguf_get_arr(g, key, &arr, NULL) == 0 && gguf_vtype_is_int(arr->v.arr.elem_type)) {
        int64_t best = -1;
        for (uint64_t i = 0; i < arr->v.arr.n; i++) {
            int64_t x = gguf_arr_int(arr, i);
            if (x > best) best = x;
        }
        return best;
    }
    return -1;
}

static double arch_float(const gguf *g, gguf_str arch, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof(key), "%.*s.%s", (int)arch.len, arch.ptr, suffix);
    double v;
    return gguf_get_float(g, key, &v, NULL) == 0 ? v : NAN;
}

static gguf_str arch_str(const gguf *g, gguf_str arch, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof(key), "%.*s.%s", (int)arch.len, arch.ptr, suffix);
    gguf_str v = {"", 0};
    if (gguf_get_str(g, key, &v, NULL) != 0) v = (gguf_str){"", 0};
    return v;
}

static int64_t get_int_or(const gguf *g, const char *key, int64_t dflt)
{
    int64_t v;
    return gguf_get_int(g, key, &v, NULL) == 0 ? v : dflt;
}

static gguf_str get_str_or_empty(const gguf *g, const char *key)
{
    gguf_str v = {"", 0};
    if (gguf_get_str(g, key, &v, NULL) != 0) v = (gguf_str){"", 0};
    return v;
}

void gguf_summarize(const gguf *g, gguf_summary *s)
{
    memset(s, 0, sizeof(*s));
    gguf_str arch = gguf_arch(g);
    s->arch = arch;
    s->name = get_str_or_empty(g, "general.name");
    s->file_type = get_int_or(g, "general.file_type", -1);

    s->n_ctx_train = arch_int(g, arch, "context_length");
    s->n_embd = arch_int(g, arch, "embedding_length");
    s->n_layer = arch_int(g, arch, "block_count");
    s->n_head = arch_int(g, arch, "attention.head_count");
    s->n_head_kv = arch_int(g, arch, "attention.head_count_kv");
    s->n_ff = arch_int(g, arch, "feed_forward_length");
    s->n_expert = arch_int(g, arch, "expert_count");
    s->n_expert_used = arch_int(g, arch, "expert_used_count");
    s->n_rot = arch_int(g, arch, "rope.dimension_count");
    s->rope_freq_base = arch_float(g, arch, "rope.freq_base");
    s->rope_scaling_type = arch_str(g, arch, "rope.scaling.type");
    s->rope_scaling_factor = arch_float(g, arch, "rope.scaling.factor");
    s->norm_rms_eps = arch_float(g, arch, "attention.layer_norm_rms_epsilon");
    s->norm_eps = arch_float(g, arch, "attention.layer_norm_epsilon");

    s->tokenizer_model = get_str_or_empty(g, "tokenizer.ggml.model");
    s->tokenizer_pre = get_str_or_empty(g, "tokenizer.ggml.pre");
    const gguf_value *tokens;
    s->n_vocab = -1;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, NULL) == 0) {
        s->n_vocab = (int64_t)tokens->v.arr.n;
    }
    s->bos_id = get_int_or(g, "tokenizer.ggml.bos_token_id", -1);
    s->eos_id = get_int_or(g, "tokenizer.ggml.eos_token_id", -1);
    s->eot_id = get_int_or(g, "tokenizer.ggml.eot_token_id", -1);
    s->unk_id = get_int_or(g, "tokenizer.ggml.unknown_token_id", -1);
    s->sep_id = get_int_or(g, "tokenizer.ggml.seperator_token_id", -1);
    s->pad_id = get_int_or(g, "tokenizer.ggml.padding_token_id", -1);
    gguf_str tmpl;
    s->has_chat_template = gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == 0;

    s->n_tensors = g->n_tensors;
    s->n_shards = g->n_shards;
    s->file_size = g->total_size;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        s->n_params += (uint64_t)t->n_elems;
        s->tensor_bytes += t->n_bytes;
        s->types[t->type].n_tensors++;
        s->types[t->type].n_bytes += t->n_bytes;
    }
}

const char *gguf_file_type_name(int64_t file_type)
{
    /* general.file_type's values (llama.cpp's llama_ftype) and the names
     * llama-bench and llama.cpp's loader print for them */
    switch (file_type) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 19: return "IQ2_XXS - 2.0625 bpw";
    case 20: return "IQ2_XS - 2.3125 bpw";
    case 21: return "Q2_K - Small";
    case 22: return "IQ3_XS - 3.3 bpw";
    case 23: return "IQ3_XXS - 3.0625 bpw";
    case 24: return "IQ1_S - 1.5625 bpw";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 26: return "IQ3_S - 3.4375 bpw";
    case 27: return "IQ3_S mix - 3.66 bpw";
    case 28: return "IQ2_S - 2.5 bpw";
    case 29: return "IQ2_M - 2.7 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 31: return "IQ1_M - 1.75 bpw";
    case 32: return "BF16";
    case 36: return "TQ1_0 - 1.69 bpw ternary";
    case 37: return "TQ2_0 - 2.06 bpw ternary";
    case 38: return "MXFP4 MoE";
    default: return NULL;
    }
}
