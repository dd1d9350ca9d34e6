/* Random-weight model files (see mkmodel.h).
 *
 * Tensor names and metadata keys are the ones llama.cpp's converters write
 * for these architectures, so the files load in other tools unchanged.
 * Matrices are N(0, 0.02); norm weights 1 + N(0, 0.1); biases N(0, 0.02).
 * Data is produced tensor by tensor at write time (row by row, quantized as
 * it goes), so a billion-parameter model never sits in memory as floats. */
#include "model/mkmodel.h"

#include "base/log.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "gguf/types.h"
#include "tensor/quant.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const model_preset g_presets[] = {
    {
        .name = "tiny", .arch = "llama",
        .about = "llama, 256 wide, 2 layers, 4 heads / 2 KV heads, FFN 512, vocab 512 (tests)",
        .n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .n_ff = 512,
        .n_vocab = 512, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
    },
    {
        .name = "llama-1b", .arch = "llama",
        .about = "Llama-3.2-1B shapes: 2048 wide, 16 layers, 32/8 heads, FFN 8192, vocab 128256",
        .n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8, .n_ff = 8192,
        .n_vocab = 128256, .n_ctx_train = 131072, .rope_freq_base = 500000.0, .rms_eps = 1e-5,
        .tied_output = true,
    },
    {
        .name = "qwen-0.5b", .arch = "qwen2",
        .about = "Qwen2.5-0.5B shapes: 896 wide, 24 layers, 14/2 heads, FFN 4864, q/k/v biases",
        .n_embd = 896, .n_layer = 24, .n_head = 14, .n_head_kv = 2, .n_ff = 4864,
        .n_vocab = 151936, .n_ctx_train = 32768, .rope_freq_base = 1000000.0, .rms_eps = 1e-6,
        .qkv_bias = true, .tied_output = true,
    },
    {
        /* OLMoE-1B-7B's shape as a qwen3moe (whose loaders everyone has):
         * 6.9B parameters, 1.3B of them active per token */
        .name = "moe-1b-7b", .arch = "qwen3moe",
        .about = "OLMoE-1B-7B shapes as qwen3moe: 2048 wide, 16 layers, 16/16 heads, 64 experts "
                 "of FFN 1024, 8 per token, vocab 50304",
        .n_embd = 2048, .n_layer = 16, .n_head = 16, .n_head_kv = 16, .n_ff = 1024,
        .n_vocab = 50304, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
        .qk_norm = true, .n_expert = 64, .n_expert_used = 8, .n_ff_exp = 1024,
    },
    {
        /* Gemma 3 1B: head size 256 is not n_embd / n_head; five sliding
         * layers (window 512, rope base 10000, set by the arch) per global
         * one (rope base 1e6); no soft-caps (gemma3 has none) */
        .name = "gemma3-1b", .arch = "gemma3",
        .about = "Gemma-3-1B shapes: 1152 wide, 26 layers, 4/1 heads of 256, FFN 6912, "
                 "vocab 262144, window 512 on 5 of 6 layers",
        .n_embd = 1152, .n_layer = 26, .n_head = 4, .n_head_kv = 1, .n_ff = 6912,
        .n_vocab = 262144, .n_ctx_train = 32768, .rope_freq_base = 1000000.0, .rms_eps = 1e-6,
        .tied_output = true, .head_dim = 256, .qk_norm = true, .post_norms = true,
        .n_swa = 512, .swa_pattern = 6,
    },
    {
        .name = "phi3-mini", .arch = "phi3",
        .about = "Phi-3-mini-4k shapes: 3072 wide, 32 layers, 32/32 heads, FFN 8192, "
                 "vocab 32064, fused QKV and gate/up",
        .n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32, .n_ff = 8192,
        .n_vocab = 32064, .n_ctx_train = 4096, .rope_freq_base = 10000.0, .rms_eps = 1e-5,
        .fused = true,
    },
    {
        /* Gemma 2 2B: the window (4096) on every other layer and the
         * soft-caps (50, 30) are the arch's defaults, as in its files */
        .name = "gemma2-2b", .arch = "gemma2",
        .about = "Gemma-2-2B shapes: 2304 wide, 26 layers, 8/4 heads of 256, FFN 9216, "
                 "vocab 256000, window 4096 on every other layer",
        .n_embd = 2304, .n_layer = 26, .n_head = 8, .n_head_kv = 4, .n_ff = 9216,
        .n_vocab = 256000, .n_ctx_train = 8192, .rope_freq_base = 10000.0, .rms_eps = 1e-6,
        .tied_output = true, .head_dim = 256, .post_norms = true, .n_swa = 4096,
    },
    {
        /* no rope in every 4th layer: the arch's rule, no key */
        .name = "smollm3-3b", .arch = "smollm3",
        .about = "SmolLM3-3B shapes: 2048 wide, 36 layers, 16/4 heads, FFN 11008, "
                 "vocab 128256, no rope in every 4th layer",
        .n_embd = 2048, .n_layer = 36, .n_head = 16, .n_head_kv = 4, .n_ff = 11008,
        .n_vocab = 128256, .n_ctx_train = 65536, .rope_freq_base = 5000000.0, .rms_eps = 1e-6,
        .tied_output = true,
    },
    {
        .name = "ministral3-3b", .arch = "mistral3",
        .about = "Ministral-3-3B shapes: 3072 wide, 26 layers, 32/8 heads of 128, FFN 9216, "
                 "vocab 131072, YaRN x16 from 16384, query temperature 0.1",
        .n_embd = 3072, .n_layer = 26, .n_head = 32, .n_head_kv = 8, .n_ff = 9216,
        .n_vocab = 131072, .n_ctx_train = 262144, .rope_freq_base = 1000000.0, .rms_eps = 1e-5,
        .tied_output = true, .head_dim = 128, .yarn_factor = 16.0, .yarn_orig_ctx = 16384,
        .yarn_log_mul = 1.0, .attn_temp_scale = 0.1,
    },
    {
        /* Mixtral's layout (llama with ffn_*_exps) at Llama-3.2-1B's
         * attention: 6.7B parameters, 1.9B of them active per token */
        .name = "mixtral-8x1b", .arch = "llama",
        .about = "Mixtral layout at Llama-3.2-1B's width: 2048 wide, 16 layers, 32/8 heads, "
                 "8 experts of FFN 8192, 2 per token, vocab 32000",
        .n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8, .n_ff = 8192,
        .n_vocab = 32000, .n_ctx_train = 32768, .rope_freq_base = 1000000.0, .rms_eps = 1e-5,
        .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 8192,
    },
    {
        /* gpt-oss-20b: 20.9B parameters, 3.6B active; its files hold the
         * experts in MXFP4 (--expert-type MXFP4) and the rest in Q8_0 */
        .name = "gpt-oss-20b", .arch = "gpt-oss",
        .about = "gpt-oss-20b shapes: 2880 wide, 24 layers, 64/8 heads of 64, 32 experts of "
                 "FFN 2880, 4 per token, vocab 201088, window 128 on every other layer, sinks",
        .n_embd = 2880, .n_layer = 24, .n_head = 64, .n_head_kv = 8, .n_ff = 2880,
        .n_vocab = 201088, .n_ctx_train = 131072, .rope_freq_base = 150000.0, .rms_eps = 1e-5,
        .head_dim = 64, .qkv_bias = true, .n_swa = 128, .n_expert = 32, .n_expert_used = 4,
        .n_ff_exp = 2880, .gpt_oss_tensors = true, .yarn_factor = 32.0, .yarn_orig_ctx = 4096,
    },
};

const model_preset *model_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof(g_presets) / sizeof(g_presets[0]); i++) {
        if (strcmp(g_presets[i].name, name) == 0) return &g_presets[i];
    }
    return NULL;
}

const model_preset *model_preset_list(size_t *n)
{
    *n = sizeof(g_presets) / sizeof(g_presets[0]);
    return g_presets;
}

/* --- what each tensor holds --- */

enum fill_kind { FILL_MATRIX, FILL_NORM, FILL_BIAS };

typedef struct tensor_spec {
    char name[GGUF_MAX_TENSOR_NAME + 1];
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[3];       /* ne[2]: experts of a 3-D expert tensor, else 1 */
    enum fill_kind kind;
} tensor_spec;

typedef struct make_ctx {
    tensor_spec *specs;
    size_t n_specs;
    uint64_t seed;
    strata_pool *pool;
    float *rows;         /* one row of floats per thread, row_cap each */
    int64_t row_cap;     /* the widest row of any tensor */
    bool quiet;
    size_t n_fallback;   /* matrices stored in another type (rows not whole blocks) */
    uint64_t n_done_bytes, n_total_bytes;
    int last_pct;
} make_ctx;

/* When rows of n_cols do not split into whole blocks of `type`, the type
 * that replaces it: the nearest type with blocks of 32, else F16. */
static uint32_t fit_type(uint32_t type, int64_t n_cols)
{
    const strata_type_info *ti = strata_type_get(type);
    if (n_cols % ti->block_elems == 0) return type;
    uint32_t alt;
    switch (type) {
    case STRATA_TYPE_Q2_K: case STRATA_TYPE_Q3_K: case STRATA_TYPE_IQ4_XS:
        alt = STRATA_TYPE_IQ4_NL; break;
    case STRATA_TYPE_Q4_K: alt = STRATA_TYPE_Q5_0; break;
    case STRATA_TYPE_Q5_K: alt = STRATA_TYPE_Q5_1; break;
    default: alt = STRATA_TYPE_Q8_0; break;
    }
    if (n_cols % strata_type_get(alt)->block_elems == 0) return alt;
    return STRATA_TYPE_F16;
}

static int add_spec(make_ctx *c, size_t cap, const char *name, uint32_t type, int64_t ne0,
                    int64_t ne1, enum fill_kind kind)
{
    if (c->n_specs == cap) return STRATA_EINVAL;
    tensor_spec *s = &c->specs[c->n_specs++];
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->kind = kind;
    s->ne[0] = ne0;
    s->ne[1] = ne1;
    s->n_dims = ne1 > 0 ? 2 : 1;
    if (ne1 <= 0) s->ne[1] = 1;
    s->type = kind == FILL_MATRIX ? fit_type(type, ne0) : STRATA_TYPE_F32;
    if (kind == FILL_MATRIX && s->type != type) c->n_fallback++;
    s->ne[2] = 1;
    return 0;
}

/* A 3-D expert tensor: n_expert matrices of (ne1, ne0), ne = [ne0, ne1, n_expert]. */
static int add_experts(make_ctx *c, size_t cap, const char *name, uint32_t type, int64_t ne0,
                       int64_t ne1, int64_t n_expert)
{
    int rc = add_spec(c, cap, name, type, ne0, ne1, FILL_MATRIX);
    if (rc == 0) {
        c->specs[c->n_specs - 1].ne[2] = n_expert;
        c->specs[c->n_specs - 1].n_dims = 3;
    }
    return rc;
}

static int64_t preset_head_dim(const model_preset *p)
{
    return p->head_dim > 0 ? p->head_dim : p->n_embd / p->n_head;
}

/* The tensors of a llama-family model, in the order converters write them
 * (with gemma3's q/k and post norms and phi3's fused matrices where the
 * preset asks). */
static int plan_tensors(make_ctx *c, size_t cap, const model_preset *p, uint32_t type,
                        uint32_t expert_type, int64_t n_vocab)
{
    int64_t head_dim = preset_head_dim(p);
    int64_t n_q = p->n_head * head_dim, n_kv = p->n_head_kv * head_dim;
    int rc = add_spec(c, cap, "token_embd.weight", type, p->n_embd, n_vocab, FILL_MATRIX);
    for (int64_t l = 0; l < p->n_layer && rc == 0; l++) {
        char n[GGUF_MAX_TENSOR_NAME + 1];
#define BLK(suffix) (snprintf(n, sizeof(n), "blk.%" PRId64 ".%s", l, suffix), n)
        rc |= add_spec(c, cap, BLK("attn_norm.weight"), type, p->n_embd, 0, FILL_NORM);
        if (p->fused) {
            rc |= add_spec(c, cap, BLK("attn_qkv.weight"), type, p->n_embd, n_q + 2 * n_kv,
                           FILL_MATRIX);
        } else {
            rc |= add_spec(c, cap, BLK("attn_q.weight"), type, p->n_embd, n_q, FILL_MATRIX);
            rc |= add_spec(c, cap, BLK("attn_k.weight"), type, p->n_embd, n_kv, FILL_MATRIX);
            rc |= add_spec(c, cap, BLK("attn_v.weight"), type, p->n_embd, n_kv, FILL_MATRIX);
        }
        if (p->qkv_bias) {
            rc |= add_spec(c, cap, BLK("attn_q.bias"), type, n_q, 0, FILL_BIAS);
            rc |= add_spec(c, cap, BLK("attn_k.bias"), type, n_kv, 0, FILL_BIAS);
            rc |= add_spec(c, cap, BLK("attn_v.bias"), type, n_kv, 0, FILL_BIAS);
        }
        rc |= add_spec(c, cap, BLK("attn_output.weight"), type, n_q, p->n_embd, FILL_MATRIX);
        if (p->gpt_oss_tensors) {
            rc |= add_spec(c, cap, BLK("attn_output.bias"), type, p->n_embd, 0, FILL_BIAS);
            rc |= add_spec(c, cap, BLK("attn_sinks.weight"), type, p->n_head, 0, FILL_BIAS);
        }
        if (p->qk_norm) {
            rc |= add_spec(c, cap, BLK("attn_q_norm.weight"), type, head_dim, 0, FILL_NORM);
            rc |= add_spec(c, cap, BLK("attn_k_norm.weight"), type, head_dim, 0, FILL_NORM);
        }
        if (p->post_norms) {
            rc |= add_spec(c, cap, BLK("post_attention_norm.weight"), type, p->n_embd, 0,
                           FILL_NORM);
        }
        /* gpt-oss names the FFN's norm after the attention */
        rc |= add_spec(c, cap, BLK(p->gpt_oss_tensors ? "post_attention_norm.weight"
                                                       : "ffn_norm.weight"),
                       type, p->n_embd, 0, FILL_NORM);
        if (p->n_expert > 0) {
            /* the router stays F32, as converters write it and quantizers
             * leave it */
            rc |= add_spec(c, cap, BLK("ffn_gate_inp.weight"), STRATA_TYPE_F32, p->n_embd,
                           p->n_expert, FILL_MATRIX);
            rc |= add_experts(c, cap, BLK("ffn_gate_exps.weight"), expert_type, p->n_embd,
                              p->n_ff_exp, p->n_expert);
            rc |= add_experts(c, cap, BLK("ffn_up_exps.weight"), expert_type, p->n_embd,
                              p->n_ff_exp, p->n_expert);
            rc |= add_experts(c, cap, BLK("ffn_down_exps.weight"), expert_type, p->n_ff_exp,
                              p->n_embd, p->n_expert);
            if (p->gpt_oss_tensors) {
                rc |= add_spec(c, cap, BLK("ffn_gate_inp.bias"), type, p->n_expert, 0, FILL_BIAS);
                rc |= add_spec(c, cap, BLK("ffn_gate_exps.bias"), type, p->n_ff_exp, p->n_expert,
                               FILL_BIAS);
                rc |= add_spec(c, cap, BLK("ffn_up_exps.bias"), type, p->n_ff_exp, p->n_expert,
                               FILL_BIAS);
                rc |= add_spec(c, cap, BLK("ffn_down_exps.bias"), type, p->n_embd, p->n_expert,
                               FILL_BIAS);
            }
        } else {
            if (p->fused) {
                rc |= add_spec(c, cap, BLK("ffn_up.weight"), type, p->n_embd, 2 * p->n_ff,
                               FILL_MATRIX);
            } else {
                rc |= add_spec(c, cap, BLK("ffn_gate.weight"), type, p->n_embd, p->n_ff,
                               FILL_MATRIX);
                rc |= add_spec(c, cap, BLK("ffn_up.weight"), type, p->n_embd, p->n_ff,
                               FILL_MATRIX);
            }
            rc |= add_spec(c, cap, BLK("ffn_down.weight"), type, p->n_ff, p->n_embd, FILL_MATRIX);
        }
        if (p->post_norms) {
            rc |= add_spec(c, cap, BLK("post_ffw_norm.weight"), type, p->n_embd, 0, FILL_NORM);
        }
#undef BLK
    }
    if (rc == 0) rc = add_spec(c, cap, "output_norm.weight", type, p->n_embd, 0, FILL_NORM);
    if (rc == 0 && !p->tied_output) {
        rc = add_spec(c, cap, "output.weight", type, p->n_embd, n_vocab, FILL_MATRIX);
    }
    return rc;
}

typedef struct fill_job {
    make_ctx *c;
    const tensor_spec *s;
    uint64_t i_tensor;
    uint8_t *dst;
    size_t row_bytes;
    int rc[STRATA_POOL_MAX_THREADS];
} fill_job;

/* One thread's share of a tensor's rows. Row r draws from its own stream
 * (seed, tensor, row), so the bytes do not depend on the thread count. */
static void fill_rows(void *ctx, int i_thread, int n_threads)
{
    fill_job *j = ctx;
    const tensor_spec *s = j->s;
    float *row = j->c->rows + (size_t)i_thread * (size_t)j->c->row_cap;
    int64_t begin, end;
    strata_split_range(s->ne[1] * s->ne[2], i_thread, n_threads, &begin, &end);
    for (int64_t r = begin; r < end; r++) {
        uint64_t x = j->c->seed ^ (j->i_tensor << 40) ^ (uint64_t)r;
        strata_rng rng;
        strata_rng_seed(&rng, strata_splitmix64(&x));
        for (int64_t k = 0; k < s->ne[0]; k++) {
            double z = strata_rng_normal(&rng);
            row[k] = (float)(s->kind == FILL_NORM ? 1.0 + 0.1 * z : 0.02 * z);
        }
        int rc = tensor_quantize_row(s->type, row, j->dst + (size_t)r * j->row_bytes, s->ne[0]);
        if (rc != 0) {
            j->rc[i_thread] = rc;
            return;
        }
    }
}

/* Produces tensor i at write time: rows drawn and quantized in parallel. */
static int fill_tensor(void *ctx, uint64_t i, void *dst, size_t n_bytes)
{
    make_ctx *c = ctx;
    fill_job j = {.c = c, .s = &c->specs[i], .i_tensor = i, .dst = dst,
                  .row_bytes = strata_type_row_bytes(c->specs[i].type, c->specs[i].ne[0])};
    strata_pool_run(c->pool, fill_rows, &j);
    for (int t = 0; t < strata_pool_n_threads(c->pool); t++) {
        if (j.rc[t] != 0) return j.rc[t];
    }
    c->n_done_bytes += n_bytes;
    int pct = c->n_total_bytes ? (int)(100 * c->n_done_bytes / c->n_total_bytes) : 100;
    if (!c->quiet && pct / 10 != c->last_pct / 10) {
        LOG_INFO("mkmodel: %d%% (%s)", pct, j.s->name);
        c->last_pct = pct;
    }
    return 0;
}

/* llama.cpp's file-type number for a model whose matrices are `type`. */
static int32_t file_type_of(uint32_t type)
{
    switch (type) {
    case STRATA_TYPE_F32: return 0;
    case STRATA_TYPE_F16: return 1;
    case STRATA_TYPE_Q4_0: return 2;
    case STRATA_TYPE_Q4_1: return 3;
    case STRATA_TYPE_Q8_0: return 7;
    case STRATA_TYPE_Q5_0: return 8;
    case STRATA_TYPE_Q5_1: return 9;
    case STRATA_TYPE_Q2_K: return 10;
    case STRATA_TYPE_Q3_K: return 12; /* the _M number, as quantizers write for pure files */
    case STRATA_TYPE_Q4_K: return 15;
    case STRATA_TYPE_Q5_K: return 17;
    case STRATA_TYPE_Q6_K: return 18;
    case STRATA_TYPE_IQ4_NL: return 25;
    case STRATA_TYPE_IQ4_XS: return 30;
    case STRATA_TYPE_BF16: return 32;
    case STRATA_TYPE_MXFP4: return 38; /* MXFP4_MOE */
    default: return -1;
    }
}

/* UTF-8 of code point cp (< 0x800 here) into out; returns its length. */
static int utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* The built-in vocabulary: byte-level BPE with no merges. Token b < 256 is
 * byte b, spelled with the printable stand-in that byte-level BPE uses
 * (printable Latin-1 bytes stand for themselves, the rest map to 256+k in
 * order); then BOS and EOS; then reserved control tokens up to n_vocab.
 * For phi3 the first four reserved ones are Phi-3's own special tokens:
 * llama.cpp looks them up by name in any model it takes for a Phi-3 (by
 * its general.name) and refuses a vocabulary without them. */
static int add_builtin_vocab(gguf_writer *w, int64_t n_vocab, const char *arch,
                             strata_err *err)
{
    static const char *const phi3_special[] = {"<unk>", "<s>", "</s>", "<|endoftext|>"};
    const bool phi3 = strcmp(arch, "phi3") == 0;
    if (n_vocab < 258) n_vocab = 258;
    char **toks = calloc((size_t)n_vocab, sizeof(*toks));
    int32_t *types = calloc((size_t)n_vocab, sizeof(*types));
    char *spelled = calloc(256, 3);
    if (toks == NULL || types == NULL || spelled == NULL) {
        free(toks);
        free(types);
        free(spelled);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        char *s = spelled + 3 * b;
        s[utf8_put(s, printable ? b : next++)] = '\0';
        toks[b] = s;
        types[b] = 1; /* normal */
    }
    int rc = 0;
    for (int64_t i = 256; i < n_vocab && rc == 0; i++) {
        char buf[48];
        if (i == 256) snprintf(buf, sizeof(buf), "<|begin_of_text|>");
        else if (i == 257) snprintf(buf, sizeof(buf), "<|end_of_text|>");
        else if (phi3 && i - 258 < 4) snprintf(buf, sizeof(buf), "%s", phi3_special[i - 258]);
        else snprintf(buf, sizeof(buf), "<|reserved_%" PRId64 "|>", i - 258);
        toks[i] = strdup(buf);
        if (toks[i] == NULL) rc = STRATA_ENOMEM;
        types[i] = 3; /* control */
    }
    if (rc == 0) rc = gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (rc == 0) rc = gguf_writer_add_str(w, "tokenizer.ggml.pre", "default", err);
    if (rc == 0) rc = gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", (uint64_t)n_vocab,
                                              (const char *const *)toks, err);
    if (rc == 0) rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32,
                                          (uint64_t)n_vocab, types, err);
    if (rc == 0) rc = gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", 0, NULL, err);
    if (rc == 0) rc = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 256, err);
    if (rc == 0) rc = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 257, err);
    if (rc == 0) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, err);
    for (int64_t i = 256; i < n_vocab; i++) free(toks[i]);
    free(toks);
    free(types);
    free(spelled);
    if (rc == STRATA_ENOMEM) return strata_err_set(err, rc, "out of memory");
    return rc;
}

/* Copies every tokenizer.* key of the GGUF at path; *n_vocab gets its size. */
static int copy_vocab(gguf_writer *w, const char *path, int64_t *n_vocab, strata_err *err)
{
    gguf *src;
    int rc = gguf_open(&src, path, err);
    if (rc != 0) return rc;
    const gguf_value *tokens;
    rc = gguf_get_arr(src, "tokenizer.ggml.tokens", &tokens, err);
    if (rc != 0) {
        gguf_close(src);
        return strata_err_set(err, STRATA_EINVAL, "%s has no tokenizer.ggml.tokens", path);
    }
    *n_vocab = (int64_t)tokens->v.arr.n;
    const gguf_shard *s = &src->shards[0];
    for (uint64_t i = 0; i < s->n_kv && rc == 0; i++) {
        if (strncmp(s->kvs[i].key, "tokenizer.", 10) == 0) {
            rc = gguf_writer_add(w, s->kvs[i].key, &s->kvs[i].value, err);
        }
    }
    gguf_close(src);
    return rc;
}

static int add_hparams(gguf_writer *w, const model_preset *p, uint32_t type, uint32_t expert_type,
                       strata_err *err)
{
    char key[128];
    int rc = gguf_writer_add_str(w, "general.architecture", p->arch, err);
    char name[96];
    if (expert_type != type && p->n_expert > 0) {
        snprintf(name, sizeof(name), "strata-%s-%s-%s", p->name, strata_type_name(type),
                 strata_type_name(expert_type));
    } else {
        snprintf(name, sizeof(name), "strata-%s-%s", p->name, strata_type_name(type));
    }
    if (rc == 0) rc = gguf_writer_add_str(w, "general.name", name, err);
    /* MXFP4 experts: llama.cpp's MXFP4_MOE file type, as its quantizer
     * writes for gpt-oss */
    int32_t ft = p->n_expert > 0 && expert_type == STRATA_TYPE_MXFP4 ? 38 : file_type_of(type);
    if (rc == 0 && ft >= 0) rc = gguf_writer_add_u32(w, "general.file_type", (uint32_t)ft, err);
#define ARCH_U32(suffix, val)                                                   \
    if (rc == 0) {                                                              \
        snprintf(key, sizeof(key), "%s.%s", p->arch, suffix);                   \
        rc = gguf_writer_add_u32(w, key, (uint32_t)(val), err);                 \
    }
#define ARCH_F32(suffix, val)                                                   \
    if (rc == 0) {                                                              \
        snprintf(key, sizeof(key), "%s.%s", p->arch, suffix);                   \
        rc = gguf_writer_add_f32(w, key, (float)(val), err);                    \
    }
    ARCH_U32("context_length", p->n_ctx_train);
    ARCH_U32("embedding_length", p->n_embd);
    ARCH_U32("block_count", p->n_layer);
    ARCH_U32("feed_forward_length", p->n_ff);
    ARCH_U32("attention.head_count", p->n_head);
    ARCH_U32("attention.head_count_kv", p->n_head_kv);
    ARCH_U32("rope.dimension_count", preset_head_dim(p));
    ARCH_F32("rope.freq_base", p->rope_freq_base);
    ARCH_F32("attention.layer_norm_rms_epsilon", p->rms_eps);
    if (p->n_expert > 0) {
        ARCH_U32("expert_count", p->n_expert);
        ARCH_U32("expert_used_count", p->n_expert_used);
        ARCH_U32("expert_feed_forward_length", p->n_ff_exp);
    }
    if (p->head_dim > 0) {
        ARCH_U32("attention.key_length", p->head_dim);
        ARCH_U32("attention.value_length", p->head_dim);
    }
    if (p->n_swa > 0) ARCH_U32("attention.sliding_window", p->n_swa);
    if (p->swa_pattern > 0) ARCH_U32("attention.sliding_window_pattern", p->swa_pattern);
    if (p->yarn_factor > 0) {
        snprintf(key, sizeof(key), "%s.rope.scaling.type", p->arch);
        if (rc == 0) rc = gguf_writer_add_str(w, key, "yarn", err);
        ARCH_F32("rope.scaling.factor", p->yarn_factor);
        ARCH_U32("rope.scaling.original_context_length", p->yarn_orig_ctx);
        if (p->yarn_log_mul != 0) ARCH_F32("rope.scaling.yarn_log_multiplier", p->yarn_log_mul);
    }
    if (p->attn_temp_scale != 0) ARCH_F32("attention.temperature_scale", p->attn_temp_scale);
#undef ARCH_U32
#undef ARCH_F32
    return rc;
}

int model_make(const model_make_opts *o, strata_err *err)
{
    const model_preset *p = o->preset;
    const uint32_t expert_type = o->has_expert_type ? o->expert_type : o->type;
    if (!tensor_type_supported(o->type) || !tensor_type_supported(expert_type)) {
        return strata_err_set(err, STRATA_EINVAL, "type %s cannot be written by mkmodel",
                              strata_type_name(tensor_type_supported(o->type) ? expert_type
                                                                              : o->type));
    }
    gguf_writer *w = gguf_writer_new();
    if (w == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    make_ctx c = {.seed = o->seed, .quiet = o->quiet, .last_pct = -10};
    int64_t n_vocab = p->n_vocab;

    int rc = add_hparams(w, p, o->type, expert_type, err);
    if (rc == 0) {
        rc = o->vocab_from ? copy_vocab(w, o->vocab_from, &n_vocab, err)
                           : add_builtin_vocab(w, n_vocab, p->arch, err);
        if (o->vocab_from == NULL && n_vocab < 258) n_vocab = 258;
    }

    size_t cap = 8 + (size_t)p->n_layer * 24;
    c.specs = calloc(cap, sizeof(*c.specs));
    c.row_cap = p->n_embd > p->n_ff ? p->n_embd : p->n_ff;
    if (p->n_ff_exp > c.row_cap) c.row_cap = p->n_ff_exp;
    if (preset_head_dim(p) * p->n_head > c.row_cap) c.row_cap = preset_head_dim(p) * p->n_head;
    int n_threads = o->n_threads > 0 ? o->n_threads : 1;
    c.pool = strata_pool_new(n_threads);
    c.rows = malloc((size_t)n_threads * (size_t)c.row_cap * sizeof(float));
    if (rc == 0 && (c.specs == NULL || c.rows == NULL || c.pool == NULL)) {
        rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    if (rc == 0 && plan_tensors(&c, cap, p, o->type, expert_type, n_vocab) != 0) {
        rc = strata_err_set(err, STRATA_EINVAL, "internal: tensor plan overflow");
    }
    for (size_t i = 0; i < c.n_specs && rc == 0; i++) {
        const tensor_spec *s = &c.specs[i];
        rc = gguf_writer_add_tensor_fill(w, s->name, s->type, s->n_dims, s->ne, fill_tensor, &c,
                                         err);
        c.n_total_bytes +=
            strata_type_row_bytes(s->type, s->ne[0]) * (uint64_t)s->ne[1] * (uint64_t)s->ne[2];
    }
    if (rc == 0) {
        if (!o->quiet && c.n_fallback > 0) {
            LOG_INFO("mkmodel: %zu matrices have rows that are not whole %s blocks; they use "
                     "the nearest type that fits", c.n_fallback, strata_type_name(o->type));
        }
        if (!o->quiet) {
            LOG_INFO("mkmodel: writing %s (%s, %s, %zu tensors)", o->out_path, p->name,
                     strata_type_name(o->type), c.n_specs);
        }
        rc = gguf_writer_write_file(w, o->out_path, err);
    }
    free(c.specs);
    free(c.rows);
    strata_pool_free(c.pool);
    gguf_writer_free(w);
    return rc;
}
