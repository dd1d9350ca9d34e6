/* The facts about a model that `strata info` shows: architecture and its
 * hyper-parameters (read by the architecture's key prefix), tokenizer facts,
 * and totals over the tensors. Reading them here keeps the CLI to printing.
 * Hyper-parameters that the file does not carry are -1 (integers) or NaN
 * (floats); strings that it does not carry are empty. */
#ifndef STRATA_GGUF_SUMMARY_H
#define STRATA_GGUF_SUMMARY_H

#include "gguf/gguf.h"

/* The value tokenizer.ggml.*_token_id uses for "no such token". */
#define GGUF_TOKEN_NONE 4294967295LL

typedef struct gguf_type_total {
    uint64_t n_tensors;
    uint64_t n_bytes;
} gguf_type_total;

typedef struct gguf_summary {
    gguf_str arch;
    gguf_str name;
    int64_t file_type; /* general.file_type, -1 when absent */

    int64_t n_ctx_train;  /* {arch}.context_length */
    int64_t n_embd;       /* {arch}.embedding_length */
    int64_t n_layer;      /* {arch}.block_count */
    int64_t n_head;       /* {arch}.attention.head_count (largest if per layer) */
    int64_t n_head_kv;    /* {arch}.attention.head_count_kv (largest if per layer) */
    int64_t n_ff;         /* {arch}.feed_forward_length (largest if per layer) */
    int64_t n_expert;     /* {arch}.expert_count */
    int64_t n_expert_used;
    int64_t n_rot;        /* {arch}.rope.dimension_count */
    double rope_freq_base;
    gguf_str rope_scaling_type;
    double rope_scaling_factor;
    double norm_rms_eps;  /* {arch}.attention.layer_norm_rms_epsilon */
    double norm_eps;      /* {arch}.attention.layer_norm_epsilon */

    gguf_str tokenizer_model; /* tokenizer.ggml.model: llama, gpt2, bert, ... */
    gguf_str tokenizer_pre;   /* tokenizer.ggml.pre */
    int64_t n_vocab;          /* length of tokenizer.ggml.tokens, -1 when absent */
    int64_t bos_id, eos_id, eot_id, unk_id, sep_id, pad_id; /* -1 absent; GGUF_TOKEN_NONE none */
    bool has_chat_template;

    uint64_t n_tensors;
    uint64_t n_params;
    uint64_t tensor_bytes;
    uint64_t file_size;
    uint32_t n_shards;
    gguf_type_total types[STRATA_TYPE_COUNT];
} gguf_summary;

/* Fills *s from g. Values of an unexpected type count as absent. */
void gguf_summarize(const gguf *g, gguf_summary *s);

/* The name llama.cpp's tools give a general.file_type value ("Q4_K -
 * Medium", "Q8_0", "F16"), or NULL for -1 and values it does not name. */
const char *gguf_file_type_name(int64_t file_type);

#endif
