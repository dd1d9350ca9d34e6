/* `strata info MODEL.gguf [--tensors] [--json]`: what a GGUF file holds.
 * The facts come from gguf_summarize; this file only prints them, as text
 * for people or as one JSON object for scripts. */
#include "cli.h"

#include "gguf/gguf.h"
#include "gguf/summary.h"
#include "model/forward.h"
#include "model/hparams.h"
#include "model/kv_cache.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void info_usage(FILE *f)
{
    fprintf(f, "usage: strata info [-m] MODEL.gguf [--tensors] [--json]\n\n"
               "  --tensors  list every tensor: name, type, shape, offset\n"
               "  --json     print one JSON object instead of text\n");
}

/* 1536 -> "1.50 KiB" */
static void fmt_bytes(char *buf, size_t n, uint64_t bytes)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, n, "%" PRIu64 " B", bytes);
    else snprintf(buf, n, "%.2f %s", v, units[u]);
}

/* 292800 -> "292.80 K" */
static void fmt_count(char *buf, size_t n, uint64_t count)
{
    if (count >= 1000000000ULL) snprintf(buf, n, "%.2f B", (double)count / 1e9);
    else if (count >= 1000000ULL) snprintf(buf, n, "%.2f M", (double)count / 1e6);
    else if (count >= 1000ULL) snprintf(buf, n, "%.2f K", (double)count / 1e3);
    else snprintf(buf, n, "%" PRIu64, count);
}

static void print_int(const char *label, int64_t v)
{
    if (v < 0) printf("%-17s -\n", label);
    else printf("%-17s %" PRId64 "\n", label, v);
}

static void fmt_token(char *buf, size_t n, const char *name, int64_t id)
{
    if (id < 0) buf[0] = '\0';
    else if (id == GGUF_TOKEN_NONE) snprintf(buf, n, " %s none", name);
    else snprintf(buf, n, " %s %" PRId64, name, id);
}

static void fmt_shape(char *buf, size_t n, const gguf_tensor *t)
{
    size_t off = 0;
    off += (size_t)snprintf(buf + off, n - off, "[");
    for (uint32_t d = 0; d < t->n_dims && off < n; d++) {
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    }
    if (off < n) snprintf(buf + off, n - off, "]");
}

/* The graph Strata would run the file with (model_hparams_describe), or
 * why it would refuse it: *ok tells which. */
static void describe_graph(const gguf *g, char *buf, size_t n, bool *ok, model_hparams *hp)
{
    strata_err err;
    *ok = model_hparams_load(g, hp, &err) == 0;
    if (*ok) model_hparams_describe(hp, buf, n);
    else snprintf(buf, n, "%s", err.msg);
}

/* The KV cache's bytes with f16 rows: per position of the layers that see
 * everything, and the most a sequence holds in its sliding-window layers
 * (their window, a block of rollback slack and a chunk, kv_cache.h). */
static void print_kv(const model_hparams *hp)
{
    const int64_t per_layer = hp->n_head_kv * (hp->head_dim + hp->head_dim_v) * 2;
    int64_t n_swa_layers = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) n_swa_layers += model_hparams_layer_swa(hp, il);
    char a[64], b[64], c[64];
    fmt_bytes(a, sizeof(a), (uint64_t)((hp->n_layer - n_swa_layers) * per_layer));
    if (n_swa_layers == 0) {
        printf("%-17s %s per position (f16 rows)\n", "KV cache:", a);
        return;
    }
    const int64_t held = hp->n_swa + KV_BLOCK_TOKENS + MODEL_DEFAULT_BATCH + 2 * KV_BLOCK_TOKENS;
    fmt_bytes(b, sizeof(b), (uint64_t)(n_swa_layers * per_layer * held));
    fmt_bytes(c, sizeof(c), (uint64_t)(hp->n_layer * per_layer));
    printf("%-17s %s per position (f16 rows, %" PRId64 " full layers) + at most %s per sequence "
           "in %" PRId64 " window layers (%s per position without windows)\n",
           "KV cache:", a, hp->n_layer - n_swa_layers, b, n_swa_layers, c);
}

static void print_text(const gguf *g, const gguf_summary *s, const char *path, bool tensors)
{
    char a[64], b[64];
    fmt_bytes(a, sizeof(a), s->file_size);
    printf("%-17s %s\n", "file:", path);
    printf("%-17s %s, GGUF v%" PRIu32 ", %" PRIu32 " shard%s\n", "size:", a,
           g->shards[0].version, s->n_shards, s->n_shards == 1 ? "" : "s");
    printf("%-17s %.*s\n", "architecture:", (int)s->arch.len, s->arch.ptr);
    printf("%-17s %.*s\n", "name:", (int)s->name.len, s->name.ptr);
    const char *ftype = gguf_file_type_name(s->file_type);
    if (ftype != NULL) printf("%-17s %s\n", "file type:", ftype);
    char graph[512];
    bool graph_ok;
    model_hparams hp;
    describe_graph(g, graph, sizeof(graph), &graph_ok, &hp);
    printf("%-17s %s%s\n", "graph:", graph_ok ? "" : "not supported: ", graph);
    if (graph_ok) print_kv(&hp);
    print_int("context length:", s->n_ctx_train);
    print_int("embedding width:", s->n_embd);
    print_int("layers:", s->n_layer);
    print_int("heads:", s->n_head);
    print_int("KV heads:", s->n_head_kv);
    print_int("FFN width:", s->n_ff);
    if (s->n_expert > 0) {
        printf("%-17s %" PRId64 " (%" PRId64 " used per token)\n", "experts:", s->n_expert,
               s->n_expert_used);
    }
    printf("%-17s", "rope:");
    if (s->n_rot >= 0) printf(" dims %" PRId64 ",", s->n_rot);
    if (!isnan(s->rope_freq_base)) printf(" base %g", s->rope_freq_base);
    else printf(" base not set (10000 by convention)");
    if (s->rope_scaling_type.len > 0) {
        printf(", scaling %.*s", (int)s->rope_scaling_type.len, s->rope_scaling_type.ptr);
        if (!isnan(s->rope_scaling_factor)) printf(" x%g", s->rope_scaling_factor);
    }
    printf("\n");
    if (!isnan(s->norm_rms_eps)) printf("%-17s %g (RMS norm)\n", "norm epsilon:", s->norm_rms_eps);
    else if (!isnan(s->norm_eps)) printf("%-17s %g (layer norm)\n", "norm epsilon:", s->norm_eps);
    else printf("%-17s -\n", "norm epsilon:");

    printf("%-17s %.*s", "tokenizer:", (int)s->tokenizer_model.len, s->tokenizer_model.ptr);
    if (s->tokenizer_pre.len > 0) {
        printf(" (pre-tokenizer %.*s)", (int)s->tokenizer_pre.len, s->tokenizer_pre.ptr);
    }
    if (s->n_vocab >= 0) printf(", %" PRId64 " tokens", s->n_vocab);
    printf("\n");
    char tok[6][48];
    fmt_token(tok[0], sizeof(tok[0]), "bos", s->bos_id);
    fmt_token(tok[1], sizeof(tok[1]), "eos", s->eos_id);
    fmt_token(tok[2], sizeof(tok[2]), "eot", s->eot_id);
    fmt_token(tok[3], sizeof(tok[3]), "unk", s->unk_id);
    fmt_token(tok[4], sizeof(tok[4]), "sep", s->sep_id);
    fmt_token(tok[5], sizeof(tok[5]), "pad", s->pad_id);
    printf("%-17s%s%s%s%s%s%s\n", "special tokens:", tok[0], tok[1], tok[2], tok[3], tok[4],
           tok[5]);
    printf("%-17s %s\n", "chat template:", s->has_chat_template ? "yes" : "no");

    fmt_count(a, sizeof(a), s->n_params);
    printf("%-17s %" PRIu64 "\n", "tensors:", s->n_tensors);
    printf("%-17s %s (%" PRIu64 ")\n", "parameters:", a, s->n_params);
    for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++) {
        if (s->types[t].n_tensors == 0) continue;
        fmt_bytes(b, sizeof(b), s->types[t].n_bytes);
        printf("  %-15s %5" PRIu64 " tensors %12s\n", strata_type_name(t), s->types[t].n_tensors,
               b);
    }
    if (!tensors) return;
    printf("\n%-40s %-8s %-24s %s\n", "tensor", "type", "shape", "offset");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        char shape[128];
        fmt_shape(shape, sizeof(shape), t);
        printf("%-40s %-8s %-24s %" PRIu64, t->name, strata_type_name(t->type), shape,
               g->shards[t->shard].data_offset + t->offset);
        if (g->n_shards > 1) printf(" (shard %" PRIu32 ")", t->shard + 1);
        printf("\n");
    }
}

static json_t *json_str(gguf_str s)
{
    return s.len > 0 ? json_stringn(s.ptr, (size_t)s.len) : json_null();
}

static json_t *json_int_or_null(int64_t v)
{
    return v < 0 ? json_null() : json_integer(v);
}

static json_t *json_real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *json_token(int64_t v)
{
    return v < 0 || v == GGUF_TOKEN_NONE ? json_null() : json_integer(v);
}

static int print_json(const gguf *g, const gguf_summary *s, const char *path, bool tensors)
{
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "file_size", json_integer((json_int_t)s->file_size));
    json_object_set_new(o, "gguf_version", json_integer(g->shards[0].version));
    json_object_set_new(o, "n_shards", json_integer(s->n_shards));
    json_object_set_new(o, "n_kv", json_integer((json_int_t)g->shards[0].n_kv));
    json_object_set_new(o, "data_offset", json_integer((json_int_t)g->shards[0].data_offset));
    json_object_set_new(o, "alignment", json_integer(g->shards[0].alignment));
    json_object_set_new(o, "architecture", json_str(s->arch));
    json_object_set_new(o, "name", json_str(s->name));
    json_object_set_new(o, "file_type", json_int_or_null(s->file_type));
    char graph[512];
    bool graph_ok;
    model_hparams mhp;
    describe_graph(g, graph, sizeof(graph), &graph_ok, &mhp);
    json_object_set_new(o, "graph", graph_ok ? json_string(graph) : json_null());
    json_object_set_new(o, "graph_error", graph_ok ? json_null() : json_string(graph));

    json_t *hp = json_object();
    json_object_set_new(hp, "context_length", json_int_or_null(s->n_ctx_train));
    json_object_set_new(hp, "embedding_length", json_int_or_null(s->n_embd));
    json_object_set_new(hp, "block_count", json_int_or_null(s->n_layer));
    json_object_set_new(hp, "head_count", json_int_or_null(s->n_head));
    json_object_set_new(hp, "head_count_kv", json_int_or_null(s->n_head_kv));
    json_object_set_new(hp, "feed_forward_length", json_int_or_null(s->n_ff));
    json_object_set_new(hp, "expert_count", json_int_or_null(s->n_expert));
    json_object_set_new(hp, "expert_used_count", json_int_or_null(s->n_expert_used));
    json_object_set_new(hp, "rope_dimension_count", json_int_or_null(s->n_rot));
    json_object_set_new(hp, "rope_freq_base", json_real_or_null(s->rope_freq_base));
    json_object_set_new(hp, "rope_scaling_type", json_str(s->rope_scaling_type));
    json_object_set_new(hp, "rope_scaling_factor", json_real_or_null(s->rope_scaling_factor));
    json_object_set_new(hp, "layer_norm_rms_epsilon", json_real_or_null(s->norm_rms_eps));
    json_object_set_new(hp, "layer_norm_epsilon", json_real_or_null(s->norm_eps));
    json_object_set_new(o, "hparams", hp);

    json_t *tk = json_object();
    json_object_set_new(tk, "model", json_str(s->tokenizer_model));
    json_object_set_new(tk, "pre", json_str(s->tokenizer_pre));
    json_object_set_new(tk, "vocab_size", json_int_or_null(s->n_vocab));
    json_object_set_new(tk, "bos_token_id", json_token(s->bos_id));
    json_object_set_new(tk, "eos_token_id", json_token(s->eos_id));
    json_object_set_new(tk, "eot_token_id", json_token(s->eot_id));
    json_object_set_new(tk, "unknown_token_id", json_token(s->unk_id));
    json_object_set_new(tk, "separator_token_id", json_token(s->sep_id));
    json_object_set_new(tk, "padding_token_id", json_token(s->pad_id));
    json_object_set_new(tk, "chat_template", json_boolean(s->has_chat_template));
    json_object_set_new(o, "tokenizer", tk);

    json_object_set_new(o, "n_tensors", json_integer((json_int_t)s->n_tensors));
    json_object_set_new(o, "n_params", json_integer((json_int_t)s->n_params));
    json_object_set_new(o, "tensor_bytes", json_integer((json_int_t)s->tensor_bytes));
    json_t *types = json_object();
    for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++) {
        if (s->types[t].n_tensors == 0) continue;
        json_t *e = json_object();
        json_object_set_new(e, "count", json_integer((json_int_t)s->types[t].n_tensors));
        json_object_set_new(e, "bytes", json_integer((json_int_t)s->types[t].n_bytes));
        json_object_set_new(types, strata_type_name(t), e);
    }
    json_object_set_new(o, "tensor_types", types);

    if (tensors) {
        json_t *arr = json_array();
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor *t = &g->tensors[i];
            json_t *e = json_object();
            json_object_set_new(e, "name", json_string(t->name));
            json_object_set_new(e, "type", json_string(strata_type_name(t->type)));
            json_t *shape = json_array();
            for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
            json_object_set_new(e, "shape", shape);
            json_object_set_new(e, "offset", json_integer((json_int_t)(g->shards[t->shard].data_offset + t->offset)));
            json_object_set_new(e, "n_bytes", json_integer((json_int_t)t->n_bytes));
            json_object_set_new(e, "shard", json_integer(t->shard));
            json_array_append_new(arr, e);
        }
        json_object_set_new(o, "tensors", arr);
    }
    int rc = json_dumpf(o, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    printf("\n");
    json_decref(o);
    return rc;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    bool tensors = false, as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tensors") == 0) {
            tensors = true;
        } else if (strcmp(a, "--json") == 0) {
            as_json = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            info_usage(stdout);
            return 0;
        } else if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) && i + 1 < argc) {
            path = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "strata info: unknown option '%s'\n", a);
            info_usage(stderr);
            return 2;
        } else if (path == NULL) {
            path = a;
        } else {
            fprintf(stderr, "strata info: one model at a time ('%s' and '%s' given)\n", path, a);
            return 2;
        }
    }
    if (path == NULL) {
        info_usage(stderr);
        return 2;
    }
    gguf *g;
    strata_err err;
    if (gguf_open(&g, path, &err) != 0) {
        fprintf(stderr, "strata info: %s\n", err.msg);
        return 1;
    }
    gguf_summary s;
    gguf_summarize(g, &s);
    int rc = 0;
    if (as_json) rc = print_json(g, &s, path, tensors) != 0;
    else print_text(g, &s, path, tensors);
    gguf_close(g);
    if (fflush(stdout) != 0) rc = 1;
    return rc;
}
