/* `strata eval -m MODEL --tokens "1 17 42 ..." --logits-out FILE [-t N]
 * [--ctx N] [--batch N]`: evaluates exactly that id sequence as one batch
 * (one sequence, positions 0..n-1) and writes the logits of every position
 * as float32 little-endian, [n_tokens][n_vocab], no header. The numbers
 * other tools compare against llama.cpp's come from here. */
#include "cli.h"

#include "base/clock.h"
#include "base/err.h"
#include "model/forward.h"
#include "model/model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void eval_usage(FILE *f)
{
    fprintf(f, "usage: strata eval -m MODEL --tokens \"ID ID ...\" --logits-out FILE [-t N] "
               "[--ctx N] [--batch N] [--kv-type T] [-ctk T] [-ctv T]\n\n"
               "  -m, --model FILE     the GGUF model\n"
               "  --tokens \"IDS\"       token ids, separated by spaces or commas\n"
               "  --logits-out FILE    where to write float32 LE logits, [n_tokens][n_vocab]\n"
               "  -t, --threads N      threads (default: the CPUs)\n"
               "  --ctx N              KV cache positions (default: the number of tokens)\n"
               "  --batch N            tokens per forward chunk (default %d)\n"
               "  --kv-type T          KV cache rows, keys and values: f16 (default) or q8_0\n"
               "  -ctk T, -ctv T       the key / value row type alone\n",
            MODEL_DEFAULT_BATCH);
}

/* Parses "1 17, 42" into a malloc'd array; -1 on a bad number. */
static int parse_tokens(const char *s, int32_t **out, int64_t *n_out)
{
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (ids == NULL) return -1;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (*p == '\0') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno != 0 || v < 0 || v > INT32_MAX ||
            (*end != '\0' && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            free(ids);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *grown = realloc(ids, cap * sizeof(*ids));
            if (grown == NULL) {
                free(ids);
                return -1;
            }
            ids = grown;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    *n_out = (int64_t)n;
    return 0;
}

static int parse_count(const char *opt, const char *s, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < 1 || v > max) {
        fprintf(stderr, "strata eval: %s wants a number from 1 to %" PRId64 ", not '%s'\n", opt,
                max, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Writes n floats as little-endian float32. */
static int write_f32le(FILE *f, const float *x, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return fwrite(x, sizeof(float), n, f) == n ? 0 : -1;
#else
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        if (fwrite(b, 1, 4, f) != 4) return -1;
    }
    return 0;
#endif
}

int cmd_eval(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_arg = NULL, *out_path = NULL;
    int64_t n_threads = cli_default_threads(), n_ctx = 0, n_batch = MODEL_DEFAULT_BATCH;
    uint32_t k_type = 0, v_type = 0; /* F16 */
    int kv_opt;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            eval_usage(stdout);
            return 0;
        } else if (v == NULL) {
            fprintf(stderr, "strata eval: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            model_path = argv[++i];
        } else if (strcmp(a, "--tokens") == 0) {
            tokens_arg = argv[++i];
        } else if (strcmp(a, "--logits-out") == 0) {
            out_path = argv[++i];
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            if (parse_count(a, argv[++i], 512, &n_threads) != 0) return 2;
        } else if (strcmp(a, "--ctx") == 0 || strcmp(a, "-c") == 0) {
            if (parse_count(a, argv[++i], INT32_MAX / 2, &n_ctx) != 0) return 2;
        } else if (strcmp(a, "--batch") == 0 || strcmp(a, "-b") == 0) {
            if (parse_count(a, argv[++i], 1 << 20, &n_batch) != 0) return 2;
        } else if ((kv_opt = cli_kv_type_option("eval", a, v, &k_type, &v_type)) != 0) {
            /* --kv-type, -ctk, -ctv: stored, or refused with a message */
            if (kv_opt < 0) return 2;
            i++;
        } else {
            fprintf(stderr, "strata eval: unknown option '%s'\n", a);
            eval_usage(stderr);
            return 2;
        }
    }
    if (model_path == NULL || tokens_arg == NULL || out_path == NULL) {
        eval_usage(stderr);
        return 2;
    }
    int32_t *tokens = NULL;
    int64_t n_tokens = 0;
    if (parse_tokens(tokens_arg, &tokens, &n_tokens) != 0) {
        fprintf(stderr, "strata eval: --tokens wants non-negative integers separated by spaces\n");
        return 2;
    }
    if (n_tokens == 0) {
        free(tokens);
        fprintf(stderr, "strata eval: --tokens is empty\n");
        return 2;
    }
    if (n_ctx == 0) n_ctx = n_tokens;
    if (n_ctx < n_tokens) {
        free(tokens);
        fprintf(stderr, "strata eval: --ctx %" PRId64 " is smaller than the %" PRId64 " tokens\n",
                n_ctx, n_tokens);
        return 2;
    }

    int status = 1;
    strata_err err;
    model *m = NULL;
    model_ctx *ctx = NULL;
    int32_t *seq = NULL, *pos = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    double t0 = strata_clock_ms();
    if (model_open(&m, model_path, &err) != 0) {
        fprintf(stderr, "strata eval: %s\n", err.msg);
        goto done;
    }
    model_ctx_params cp = {.n_ctx = n_ctx, .n_seq_max = 1, .n_batch = n_batch,
                           .n_threads = (int)n_threads, .k_type = k_type, .v_type = v_type};
    if (model_ctx_init(&ctx, m, &cp, &err) != 0 || kv_seq_add(model_ctx_kv(ctx), 0, &err) != 0) {
        fprintf(stderr, "strata eval: %s\n", err.msg);
        goto done;
    }
    const int64_t n_vocab = m->hp.n_vocab;
    seq = calloc((size_t)n_tokens, sizeof(*seq));
    pos = malloc((size_t)n_tokens * sizeof(*pos));
    logits = malloc((size_t)n_tokens * (size_t)n_vocab * sizeof(float));
    if (seq == NULL || pos == NULL || logits == NULL) {
        fprintf(stderr, "strata eval: out of memory\n");
        goto done;
    }
    for (int64_t i = 0; i < n_tokens; i++) pos[i] = (int32_t)i;
    double t1 = strata_clock_ms();
    model_batch b = {.n_tokens = n_tokens, .tokens = tokens, .seq_ids = seq, .pos = pos};
    if (model_forward(ctx, &b, logits, &err) != 0) {
        fprintf(stderr, "strata eval: %s\n", err.msg);
        goto done;
    }
    double t2 = strata_clock_ms();
    f = fopen(out_path, "wb");
    if (f == NULL) {
        fprintf(stderr, "strata eval: cannot open %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    if (write_f32le(f, logits, (size_t)n_tokens * (size_t)n_vocab) != 0 || fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "strata eval: cannot write %s: %s\n", out_path, strerror(errno));
        goto done;
    }
    f = NULL;
    fprintf(stderr, "strata eval: %" PRId64 " tokens x %" PRId64 " logits to %s; load %.1f ms, "
                    "forward %.1f ms (%.1f tok/s, %" PRId64 " threads)\n",
            n_tokens, n_vocab, out_path, t1 - t0, t2 - t1,
            (double)n_tokens / ((t2 - t1) / 1e3 + 1e-12), n_threads);
    status = 0;
done:
    if (f != NULL) fclose(f);
    free(logits);
    free(pos);
    free(seq);
    free(tokens);
    model_ctx_free(ctx);
    model_close(m);
    return status;
}
