/* `strata bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [-b BATCH]`:
 * prompt processing and decode speed of one model, as a table in the shape
 * of llama-bench's:
 *   ppN: N prompt tokens evaluated from an empty cache (in chunks of the
 *        batch size), tokens per second;
 *   tgN: N tokens decoded one at a time from an empty cache.
 * Token ids are drawn from a fixed seed, so every run feeds the same input.
 * One warm-up run of each test comes first (page faults on the mapped
 * weights, caches); then REPS timed runs, reported as mean ± standard
 * deviation. */
#include "cli.h"

#include "base/clock.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "gguf/summary.h"
#include "model/forward.h"
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: strata bench -m MODEL [-p N] [-n N] [-t THREADS] [-r REPS] [-b BATCH]\n\n"
               "  -p N        prompt tokens of the pp test (default 512; 0 skips it)\n"
               "  -n N        decoded tokens of the tg test (default 128; 0 skips it)\n"
               "  -t N        threads (default: the CPUs)\n"
               "  -r N        timed repetitions (default 5)\n"
               "  -b N        tokens per forward chunk (default %d)\n"
               "  --json      one JSON object per test instead of the table\n",
            MODEL_DEFAULT_BATCH);
}

typedef struct bench_run {
    model_ctx *ctx;
    int32_t *tokens;
    int32_t *seq_ids;
    int32_t *pos;
    int8_t *want;
    float *logits;
} bench_run;

/* Evaluates tokens[0..n) as one prompt from an empty sequence 0, asking for
 * the last logits only. Returns elapsed seconds, or -1 on error. */
static double run_pp(bench_run *r, int64_t n, strata_err *err)
{
    kv_cache *kv = model_ctx_kv(r->ctx);
    if (kv_seq_active(kv, 0)) kv_seq_remove(kv, 0);
    if (kv_seq_add(kv, 0, err) != 0) return -1;
    for (int64_t i = 0; i < n; i++) {
        r->seq_ids[i] = 0;
        r->pos[i] = (int32_t)i;
        r->want[i] = i == n - 1;
    }
    model_batch b = {.n_tokens = n, .tokens = r->tokens, .seq_ids = r->seq_ids, .pos = r->pos,
                     .want_logits = r->want};
    double t0 = strata_clock_ms();
    if (model_forward(r->ctx, &b, r->logits, err) != 0) return -1;
    return (strata_clock_ms() - t0) / 1000.0;
}

/* Decodes n tokens one at a time from an empty sequence 0. */
static double run_tg(bench_run *r, int64_t n, strata_err *err)
{
    kv_cache *kv = model_ctx_kv(r->ctx);
    if (kv_seq_active(kv, 0)) kv_seq_remove(kv, 0);
    if (kv_seq_add(kv, 0, err) != 0) return -1;
    double t0 = strata_clock_ms();
    for (int64_t i = 0; i < n; i++) {
        int32_t seq = 0, pos = (int32_t)i;
        model_batch b = {.n_tokens = 1, .tokens = &r->tokens[i], .seq_ids = &seq, .pos = &pos};
        if (model_forward(r->ctx, &b, r->logits, err) != 0) return -1;
    }
    return (strata_clock_ms() - t0) / 1000.0;
}

static void mean_sd(const double *v, int n, double *mean, double *sd)
{
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) q += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0.0;
}

static int parse_count(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*v == '\0' || *end != '\0' || x < lo || x > hi) {
        fprintf(stderr, "strata bench: %s wants a number from %" PRId64 " to %" PRId64
                ", not '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    const char *path = NULL;
    int64_t n_prompt = 512, n_gen = 128, n_threads = cli_default_threads(), reps = 5;
    int64_t n_batch = MODEL_DEFAULT_BATCH;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            bench_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            as_json = true;
            continue;
        } else if (v == NULL) {
            fprintf(stderr, "strata bench: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            path = v;
        } else if (strcmp(a, "-p") == 0) {
            rc = parse_count(a, v, 0, 1 << 20, &n_prompt);
        } else if (strcmp(a, "-n") == 0) {
            rc = parse_count(a, v, 0, 1 << 20, &n_gen);
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            rc = parse_count(a, v, 1, 512, &n_threads);
        } else if (strcmp(a, "-r") == 0) {
            rc = parse_count(a, v, 1, 1000, &reps);
        } else if (strcmp(a, "-b") == 0) {
            rc = parse_count(a, v, 1, 1 << 16, &n_batch);
        } else {
            fprintf(stderr, "strata bench: unknown option '%s'\n", a);
            bench_usage(stderr);
            return 2;
        }
        if (rc != 0) return 2;
        i++;
    }
    if (path == NULL) {
        bench_usage(stderr);
        return 2;
    }

    strata_err err;
    model *m;
    if (model_open(&m, path, &err) != 0) {
        fprintf(stderr, "strata bench: %s\n", err.msg);
        return 1;
    }
    int64_t n_max = n_prompt > n_gen ? n_prompt : n_gen;
    if (n_max == 0) n_max = 1;
    bench_run r = {0};
    model_ctx_params cp = {.n_ctx = n_max, .n_seq_max = 1, .n_batch = n_batch,
                           .n_threads = (int)n_threads};
    int rc = model_ctx_init(&r.ctx, m, &cp, &err);
    r.tokens = malloc((size_t)n_max * sizeof(int32_t));
    r.seq_ids = malloc((size_t)n_max * sizeof(int32_t));
    r.pos = malloc((size_t)n_max * sizeof(int32_t));
    r.want = malloc((size_t)n_max);
    r.logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    if (rc == 0 && (!r.tokens || !r.seq_ids || !r.pos || !r.want || !r.logits)) {
        rc = strata_err_set(&err, STRATA_ENOMEM, "out of memory");
    }
    if (rc != 0) {
        fprintf(stderr, "strata bench: %s\n", err.msg);
    } else {
        strata_rng rng;
        strata_rng_seed(&rng, 1234);
        for (int64_t i = 0; i < n_max; i++) {
            r.tokens[i] = (int32_t)(strata_rng_next(&rng) % (uint64_t)m->hp.n_vocab);
        }

        gguf_summary s;
        gguf_summarize(m->g, &s);
        char model_desc[96], size_desc[32];
        uint32_t main_type = 0; /* the type holding the most bytes */
        for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++) {
            if (s.types[t].n_bytes > s.types[main_type].n_bytes) main_type = t;
        }
        double np = (double)s.n_params;
        snprintf(model_desc, sizeof(model_desc), "%s %.2f%s %s", m->hp.arch_name,
                 np >= 1e9 ? np / 1e9 : np / 1e6, np >= 1e9 ? "B" : "M",
                 strata_type_name(main_type));
        snprintf(size_desc, sizeof(size_desc), "%.2f MiB", (double)s.tensor_bytes / 1048576.0);
        char cpu[160];
        strata_cpu_describe(cpu, sizeof(cpu));
        if (!as_json) {
            printf("# %s\n# %s\n\n", path, cpu);
            printf("| %-24s | %12s | %7s | %7s | %15s |\n", "model", "size", "threads", "test",
                   "t/s");
            printf("| %s | %s | %s | %s | %s |\n", "------------------------",
                   "-----------:", "------:", "------:", "---------------:");
        }
        double *secs = malloc((size_t)reps * sizeof(double));
        double *tps = malloc((size_t)reps * sizeof(double));
        for (int test = 0; test < 2 && rc == 0 && secs && tps; test++) {
            int64_t n = test == 0 ? n_prompt : n_gen;
            if (n == 0) continue;
            double w = test == 0 ? run_pp(&r, n < 32 ? n : 32, &err) : run_tg(&r, 4, &err);
            for (int k = 0; k < reps && w >= 0; k++) {
                secs[k] = test == 0 ? run_pp(&r, n, &err) : run_tg(&r, n, &err);
                if (secs[k] < 0) w = -1;
                else tps[k] = (double)n / secs[k];
            }
            if (w < 0) {
                fprintf(stderr, "strata bench: %s\n", err.msg);
                rc = 1;
                break;
            }
            double mean, sd;
            mean_sd(tps, (int)reps, &mean, &sd);
            char test_name[32];
            snprintf(test_name, sizeof(test_name), "%s%" PRId64, test == 0 ? "pp" : "tg", n);
            if (as_json) {
                printf("{\"model\": \"%s\", \"size_bytes\": %" PRIu64 ", \"threads\": %" PRId64
                       ", \"test\": \"%s\", \"n_tokens\": %" PRId64 ", \"reps\": %" PRId64
                       ", \"tokens_per_second\": %.3f, \"stddev\": %.3f}\n",
                       path, s.tensor_bytes, n_threads, test_name, n, reps, mean, sd);
            } else {
                char rate[48];
                snprintf(rate, sizeof(rate), "%.2f ± %.2f", mean, sd);
                printf("| %-24s | %12s | %7" PRId64 " | %7s | %16s |\n", model_desc,
                       size_desc, n_threads, test_name, rate);
            }
            fflush(stdout);
        }
        free(secs);
        free(tps);
    }
    model_ctx_free(r.ctx);
    model_close(m);
    free(r.tokens);
    free(r.seq_ids);
    free(r.pos);
    free(r.want);
    free(r.logits);
    return rc == 0 ? 0 : 1;
}
