/* `strata bench -m MODEL [-p 512] [-n 128] [-d 0,...] [-ctk/-ctv f16,q8_0]
 * [--kv-type f16,q8_0] [-t THREADS] [-r REPS] [-b BATCH]`:
 * prompt processing and decode speed of one model, as a table in the shape
 * of llama-bench's:
 *   ppN: N prompt tokens evaluated after the cache holds DEPTH tokens (in
 *        chunks of the batch size), tokens per second;
 *   tgN: N tokens decoded one at a time after DEPTH tokens;
 * named "ppN @ dDEPTH" when DEPTH > 0, as llama-bench -d names them. The
 * DEPTH tokens are evaluated once per (KV type, depth), untimed; each
 * timed run rewinds the sequence to DEPTH and runs the test from there
 * (the rows below DEPTH are the same every time, so this measures what a
 * fresh prefill would, without paying for it per repetition).
 * Several depths and KV types run in one invocation, one context per type
 * pair, and the repetitions alternate between the types, so they are
 * measured side by side under the same machine load. Token ids are drawn from a
 * fixed seed, so every run feeds the same input. One warm-up run of each
 * test comes first (page faults on the mapped weights, caches); then REPS
 * timed runs, reported as mean ± standard deviation (and, in JSON, the
 * median, which a noisy machine's outliers move less). JSON rows carry
 * decode_bytes, the weight bytes one decode step reads: for a mixture of
 * experts only the n_used experts of each layer (the model column names
 * the active parameters, "A1.33B"). */
#include "cli.h"

#include "base/clock.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "gguf/summary.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/moe.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: strata bench -m MODEL [-p N] [-n N] [-d D,...] [-ctk T,...] [-ctv T,...]\n"
               "                    [--kv-type T,...] [-t THREADS] [-r REPS] [-b BATCH]\n\n"
               "  -p N        prompt tokens of the pp test (default 512; 0 skips it)\n"
               "  -n N        decoded tokens of the tg test (default 128; 0 skips it)\n"
               "  -d D,...    tokens already in the cache before each test (default 0)\n"
               "  -ctk T,...  KV key row types, f16 or q8_0 (default f16)\n"
               "  -ctv T,...  KV value row types (default f16); every -ctk x -ctv pair runs\n"
               "  --kv-type T,...  keys and values of the same type, one run per type\n"
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

/* Makes sequence 0 hold exactly the first `depth` tokens: evaluated once
 * (untimed) when the sequence is shorter, else rewound to depth. */
static int set_depth(bench_run *r, int64_t depth, strata_err *err)
{
    kv_cache *kv = model_ctx_kv(r->ctx);
    if (!kv_seq_active(kv, 0) && kv_seq_add(kv, 0, err) != 0) return -1;
    int64_t have = kv_seq_len(kv, 0);
    if (have > depth && !kv_seq_can_truncate(kv, 0, depth)) {
        /* sliding-window layers gave back the window of depth: refill */
        kv_seq_truncate(kv, 0, 0);
        have = 0;
    }
    if (have >= depth) {
        kv_seq_truncate(kv, 0, depth);
        return 0;
    }
    for (int64_t i = have; i < depth; i++) {
        r->seq_ids[i] = 0;
        r->pos[i] = (int32_t)i;
        r->want[i] = 0;
    }
    model_batch b = {.n_tokens = depth - have, .tokens = r->tokens + have,
                     .seq_ids = r->seq_ids + have, .pos = r->pos + have,
                     .want_logits = r->want + have};
    return model_forward(r->ctx, &b, NULL, err) != 0 ? -1 : 0;
}

/* Evaluates tokens[depth..depth+n) as one prompt after `depth` tokens of
 * sequence 0, asking for the last logits only. Returns elapsed seconds, or
 * -1 on error. */
static double run_pp(bench_run *r, int64_t depth, int64_t n, strata_err *err)
{
    if (set_depth(r, depth, err) != 0) return -1;
    for (int64_t i = depth; i < depth + n; i++) {
        r->seq_ids[i] = 0;
        r->pos[i] = (int32_t)i;
        r->want[i] = i == depth + n - 1;
    }
    model_batch b = {.n_tokens = n, .tokens = r->tokens + depth, .seq_ids = r->seq_ids + depth,
                     .pos = r->pos + depth, .want_logits = r->want + depth};
    double t0 = strata_clock_ms();
    if (model_forward(r->ctx, &b, r->logits, err) != 0) return -1;
    return (strata_clock_ms() - t0) / 1000.0;
}

/* Decodes n tokens one at a time after `depth` tokens of sequence 0. */
static double run_tg(bench_run *r, int64_t depth, int64_t n, strata_err *err)
{
    if (set_depth(r, depth, err) != 0) return -1;
    double t0 = strata_clock_ms();
    for (int64_t i = depth; i < depth + n; i++) {
        int32_t seq = 0, pos = (int32_t)i;
        model_batch b = {.n_tokens = 1, .tokens = &r->tokens[i], .seq_ids = &seq, .pos = &pos};
        if (model_forward(r->ctx, &b, r->logits, err) != 0) return -1;
    }
    return (strata_clock_ms() - t0) / 1000.0;
}

#define BENCH_MAX_LIST 8

/* A comma-separated list of counts in [lo, hi], at most BENCH_MAX_LIST. */
static int parse_count_list(const char *opt, const char *v, int64_t lo, int64_t hi,
                            int64_t *out, int *n_out)
{
    int n = 0;
    const char *p = v;
    for (;;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || x < lo || x > hi || n == BENCH_MAX_LIST) {
            fprintf(stderr, "strata bench: %s wants up to %d numbers from %" PRId64 " to %" PRId64
                    ", separated by commas, not '%s'\n", opt, BENCH_MAX_LIST, lo, hi, v);
            return -1;
        }
        out[n++] = x;
        if (*end == '\0') break;
        p = end + 1;
    }
    *n_out = n;
    return 0;
}

/* A comma-separated list of KV row type names (kv_type_parse). */
static int parse_type_list(const char *opt, const char *v, uint32_t *out, int *n_out)
{
    int n = 0;
    char buf[128];
    if (strlen(v) >= sizeof(buf)) {
        fprintf(stderr, "strata bench: %s: list too long\n", opt);
        return -1;
    }
    strcpy(buf, v);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        strata_err err;
        if (n == BENCH_MAX_LIST || kv_type_parse(t, &out[n], &err) != 0) {
            fprintf(stderr, "strata bench: %s: %s\n", opt,
                    n == BENCH_MAX_LIST ? "too many types" : err.msg);
            return -1;
        }
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "strata bench: %s wants f16 or q8_0\n", opt);
        return -1;
    }
    *n_out = n;
    return 0;
}

/* The median of v[0..n) (sorts v). */
static double median_of(double *v, int n)
{
    for (int i = 1; i < n; i++) { /* insertion sort: n is a few repetitions */
        double x = v[i];
        int j = i - 1;
        for (; j >= 0 && v[j] > x; j--) v[j + 1] = v[j];
        v[j + 1] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
    int64_t depths[BENCH_MAX_LIST] = {0};
    int n_depths = 1;
    uint32_t ctk[BENCH_MAX_LIST] = {STRATA_TYPE_F16}, ctv[BENCH_MAX_LIST] = {STRATA_TYPE_F16};
    int n_ctk = 1, n_ctv = 1;
    bool paired = false; /* --kv-type: K and V types go together */
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
        } else if (strcmp(a, "-d") == 0 || strcmp(a, "--n-depth") == 0) {
            rc = parse_count_list(a, v, 0, 1 << 20, depths, &n_depths);
        } else if (strcmp(a, "-ctk") == 0 || strcmp(a, "--cache-type-k") == 0) {
            rc = parse_type_list(a, v, ctk, &n_ctk);
            paired = false;
        } else if (strcmp(a, "-ctv") == 0 || strcmp(a, "--cache-type-v") == 0) {
            rc = parse_type_list(a, v, ctv, &n_ctv);
            paired = false;
        } else if (strcmp(a, "--kv-type") == 0) {
            rc = parse_type_list(a, v, ctk, &n_ctk);
            if (rc == 0) {
                memcpy(ctv, ctk, sizeof(ctk));
                n_ctv = n_ctk;
                paired = true;
            }
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
    int64_t d_max = 0;
    for (int i = 0; i < n_depths; i++) d_max = depths[i] > d_max ? depths[i] : d_max;
    int64_t n_max = d_max + (n_prompt > n_gen ? n_prompt : n_gen);
    if (n_max == 0) n_max = 1;
    bench_run r = {0};
    int rc = 0;
    r.tokens = malloc((size_t)n_max * sizeof(int32_t));
    r.seq_ids = malloc((size_t)n_max * sizeof(int32_t));
    r.pos = malloc((size_t)n_max * sizeof(int32_t));
    r.want = malloc((size_t)n_max);
    r.logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    /* (type pair, repetition) rates */
    double *tps = malloc((size_t)(BENCH_MAX_LIST * BENCH_MAX_LIST) * (size_t)reps * sizeof(double));
    if (!r.tokens || !r.seq_ids || !r.pos || !r.want || !r.logits || !tps) {
        rc = strata_err_set(&err, STRATA_ENOMEM, "out of memory");
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
        uint64_t idle_bytes = 0, idle_params = 0;
        model_moe_inactive(m, &idle_bytes, &idle_params);
        char active[32] = "";
        if (idle_params > 0) {
            /* a mixture of experts: also the parameters a token uses */
            double na = np - (double)idle_params;
            snprintf(active, sizeof(active), " A%.2f%s", na >= 1e9 ? na / 1e9 : na / 1e6,
                     na >= 1e9 ? "B" : "M");
        }
        /* the file type's name, as llama-bench prints it (a Q4_K_M file's
         * largest tensor may be a Q8_0 or Q6_K output matrix) */
        const char *ftype = gguf_file_type_name(s.file_type);
        snprintf(model_desc, sizeof(model_desc), "%s %.2f%s%s %s", m->hp.arch_name,
                 np >= 1e9 ? np / 1e9 : np / 1e6, np >= 1e9 ? "B" : "M", active,
                 ftype != NULL ? ftype : strata_type_name(main_type));
        snprintf(size_desc, sizeof(size_desc), "%.2f MiB", (double)s.tensor_bytes / 1048576.0);
        /* bytes one decode step streams: every tensor but the embedding
         * table, of which it reads one row (unless the output is tied to
         * it), and of a mixture of experts only the experts a token uses */
        uint64_t decode_bytes = s.tensor_bytes - idle_bytes;
        const gguf_tensor *te = gguf_find_tensor(m->g, "token_embd.weight");
        if (te != NULL && !m->tied_output) decode_bytes -= (uint64_t)te->n_bytes;
        char cpu[160];
        strata_cpu_describe(cpu, sizeof(cpu));
        if (!as_json) {
            printf("# %s\n# %s\n\n", path, cpu);
            printf("| %-30s | %12s | %7s | %6s | %6s | %14s | %15s |\n", "model", "size",
                   "threads", "type_k", "type_v", "test", "t/s");
            printf("| %s | %s | %s | %s | %s | %s | %s |\n", "------------------------------",
                   "-----------:", "------:", "-----:", "-----:", "-------------:",
                   "---------------:");
        }
        /* every K x V pair, or the pairs of --kv-type; one context each, all
         * open at once so that repetitions alternate between them */
        const int n_combo = paired ? n_ctk : n_ctk * n_ctv;
        model_ctx *ctxs[BENCH_MAX_LIST * BENCH_MAX_LIST] = {0};
        uint32_t kts[BENCH_MAX_LIST * BENCH_MAX_LIST], vts[BENCH_MAX_LIST * BENCH_MAX_LIST];
        for (int c = 0; c < n_combo && rc == 0; c++) {
            kts[c] = ctk[paired ? c : c / n_ctv];
            vts[c] = ctv[paired ? c : c % n_ctv];
            model_ctx_params cp = {.n_ctx = n_max, .n_seq_max = 1, .n_batch = n_batch,
                                   .n_threads = (int)n_threads, .k_type = kts[c],
                                   .v_type = vts[c]};
            if (model_ctx_init(&ctxs[c], m, &cp, &err) != 0) {
                fprintf(stderr, "strata bench: %s\n", err.msg);
                rc = 1;
            }
        }
        for (int id = 0; id < n_depths && rc == 0; id++) {
            const int64_t depth = depths[id];
            for (int test = 0; test < 2 && rc == 0; test++) {
                int64_t n = test == 0 ? n_prompt : n_gen;
                if (n == 0) continue;
                /* a warm-up per type, then repetition k of every type before
                 * repetition k + 1 of any: a change in the machine's load
                 * hits all types alike */
                double w = 0;
                for (int c = 0; c < n_combo && w >= 0; c++) {
                    r.ctx = ctxs[c];
                    w = test == 0 ? run_pp(&r, depth, n < 32 ? n : 32, &err)
                                  : run_tg(&r, depth, n < 4 ? n : 4, &err);
                }
                for (int k = 0; k < reps && w >= 0; k++) {
                    for (int c = 0; c < n_combo && w >= 0; c++) {
                        r.ctx = ctxs[c];
                        double sec = test == 0 ? run_pp(&r, depth, n, &err)
                                               : run_tg(&r, depth, n, &err);
                        if (sec < 0) w = -1;
                        else tps[(size_t)c * (size_t)reps + (size_t)k] = (double)n / sec;
                    }
                }
                r.ctx = NULL;
                if (w < 0) {
                    fprintf(stderr, "strata bench: %s\n", err.msg);
                    rc = 1;
                    break;
                }
                char test_name[48];
                int len = snprintf(test_name, sizeof(test_name), "%s%" PRId64,
                                   test == 0 ? "pp" : "tg", n);
                if (depth > 0) {
                    snprintf(test_name + len, sizeof(test_name) - (size_t)len, " @ d%" PRId64,
                             depth);
                }
                for (int c = 0; c < n_combo; c++) {
                    double *v = tps + (size_t)c * (size_t)reps;
                    double mean, sd;
                    mean_sd(v, (int)reps, &mean, &sd);
                    const double median = median_of(v, (int)reps);
                    const char *tk = kts[c] == STRATA_TYPE_Q8_0 ? "q8_0" : "f16";
                    const char *tv = vts[c] == STRATA_TYPE_Q8_0 ? "q8_0" : "f16";
                    if (as_json) {
                        printf("{\"model\": \"%s\", \"size_bytes\": %" PRIu64
                               ", \"decode_bytes\": %" PRIu64 ", \"threads\": %" PRId64 ", \"type_k\": \"%s\", "
                               "\"type_v\": \"%s\", \"test\": \"%s\", \"n_tokens\": %" PRId64
                               ", \"n_depth\": %" PRId64 ", \"reps\": %" PRId64
                               ", \"tokens_per_second\": %.3f, \"stddev\": %.3f"
                               ", \"median\": %.3f}\n",
                               path, s.tensor_bytes, decode_bytes, n_threads, tk, tv, test_name, n, depth,
                               reps, mean, sd, median);
                    } else {
                        char rate[48];
                        snprintf(rate, sizeof(rate), "%.2f ± %.2f", mean, sd);
                        printf("| %-30s | %12s | %7" PRId64 " | %6s | %6s | %14s | %16s |\n",
                               model_desc, size_desc, n_threads, tk, tv, test_name, rate);
                    }
                }
                fflush(stdout);
            }
        }
        for (int c = 0; c < n_combo; c++) model_ctx_free(ctxs[c]);
    }
    free(tps);
    model_ctx_free(r.ctx);
    model_close(m);
    free(r.tokens);
    free(r.seq_ids);
    free(r.pos);
    free(r.want);
    free(r.logits);
    return rc == 0 ? 0 : 1;
}
