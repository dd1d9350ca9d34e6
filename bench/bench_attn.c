/* bench_attn: the cost of attention at depth per KV type, alone.
 *
 * One sequence already holding DEPTH positions of random KV rows (llama-1b's
 * shape by default: 8 KV heads of 64, 4 query heads each), then one prefill
 * chunk of TOKENS new positions attended as model_attention does in a
 * forward pass (one layer). Prints, per KV type, the thread CPU time per
 * chunk (median of REPS; CPU time rather than wall time, so that other work
 * on the machine moves it less) and the ratio to f16.
 *
 *   bench_attn [--depth 8192] [--tokens 512] [--reps 5] [--heads-kv 8] [--group 4] [--head-dim 64]
 *
 * STRATA_CPU=scalar|avx2|avx512 caps the SIMD level (base/cpu.h). */
#include "base/cpu.h"
#include "gguf/types.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fill_row(uint32_t type, uint8_t *row, int64_t n, uint32_t *seed)
{
    float x[512];
    for (int64_t i = 0; i < n; i++) x[i] = frand(seed);
    if (type == STRATA_TYPE_F16) {
        uint16_t *h = (uint16_t *)(void *)row;
        for (int64_t i = 0; i < n; i++) h[i] = tensor_f32_to_f16(x[i]);
    } else {
        tensor_quantize_row(STRATA_TYPE_Q8_0, x, row, n);
    }
}

static double run(uint32_t type, int64_t depth, int64_t n_tok, int reps, int64_t n_kv, int64_t G,
                  int64_t hd)
{
    kv_cache_params p = {.n_layer = 1, .n_head_kv = n_kv, .head_dim = hd, .head_dim_v = hd,
                         .n_ctx = depth + n_tok, .n_seq_max = 1, .k_type = type, .v_type = type};
    strata_err err = {0};
    kv_cache *kv = NULL;
    if (kv_cache_init(&kv, &p, &err) != 0 || kv_seq_add(kv, 0, &err) != 0 ||
        kv_seq_extend(kv, 0, depth + n_tok, &err) != 0) {
        fprintf(stderr, "bench_attn: %s\n", err.msg);
        exit(1);
    }
    uint32_t seed = 7;
    for (int64_t pos = 0; pos < depth + n_tok; pos++) {
        for (int64_t h = 0; h < n_kv; h++) {
            fill_row(type, kv_k_row(kv, 0, 0, pos, h), hd, &seed);
            fill_row(type, kv_v_row(kv, 0, 0, pos, h), hd, &seed);
        }
    }
    const int64_t n_head = n_kv * G;
    int32_t *seq = calloc((size_t)n_tok, sizeof(int32_t));
    int32_t *pos = malloc((size_t)n_tok * sizeof(int32_t));
    for (int64_t i = 0; i < n_tok; i++) pos[i] = (int32_t)(depth + i);
    const size_t qf = (size_t)(n_tok * n_head * hd);
    float *q = malloc(qf * sizeof(float)), *out = malloc(qf * sizeof(float));
    for (size_t i = 0; i < qf; i++) q[i] = frand(&seed);
    float *scratch = malloc(model_attention_scratch_floats(kv, n_head) * sizeof(float));
    model_attn_args a = {.kv = kv, .layer = 0, .n_tokens = n_tok, .seq_ids = seq, .pos = pos,
                         .q = q, .out = out, .n_head = n_head,
                         .scale = 1.0f / sqrtf((float)hd), .scratch = scratch};
    double *t = malloc((size_t)reps * sizeof(double));
    model_attention(NULL, &a); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_ms();
        model_attention(NULL, &a);
        t[r] = cpu_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    double med = t[reps / 2];
    free(t);
    free(scratch);
    free(q);
    free(out);
    free(seq);
    free(pos);
    kv_cache_free(kv);
    return med;
}

int main(int argc, char **argv)
{
    int64_t depth = 8192, n_tok = 512, n_kv = 8, G = 4, hd = 64;
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i];
        long long v = atoll(argv[i + 1]);
        if (!strcmp(a, "--depth")) depth = v;
        else if (!strcmp(a, "--tokens")) n_tok = v;
        else if (!strcmp(a, "--reps")) reps = (int)v;
        else if (!strcmp(a, "--heads-kv")) n_kv = v;
        else if (!strcmp(a, "--group")) G = v;
        else if (!strcmp(a, "--head-dim")) hd = v;
        else {
            fprintf(stderr, "bench_attn: unknown option %s\n", a);
            return 2;
        }
    }
    if (reps < 1 || n_tok < 1 || depth < 0) return 2;
    char cpu[160];
    strata_cpu_describe(cpu, sizeof(cpu));
    printf("# %s\n# depth %lld, %lld new tokens, %lld KV heads x %lld query heads, head dim %lld, "
           "one thread, median of %d\n",
           cpu, (long long)depth, (long long)n_tok, (long long)n_kv, (long long)G, (long long)hd,
           reps);
    double f16 = run(STRATA_TYPE_F16, depth, n_tok, reps, n_kv, G, hd);
    double q8 = run(STRATA_TYPE_Q8_0, depth, n_tok, reps, n_kv, G, hd);
    printf("| KV type | CPU ms per chunk (one layer) | / f16 |\n|---|---:|---:|\n");
    printf("| f16 | %.1f | 1.00 |\n| q8_0 | %.1f | %.2f |\n", f16, q8, q8 / f16);
    return 0;
}
