/* bench_x8: the x8 kernels alone, one thread, matrix x vector (decode).
 *
 * For each type and SIMD level it times the kernel over a packed matrix in
 * two settings:
 *  - "cache": a matrix small enough for the L2 (by default 128 rows x 2048
 *    columns), called again and again: the rate at which the kernel can
 *    consume weights when memory is not the limit (its instruction bound);
 *  - "mem": copies of the matrix cycled over a working set 4 times the
 *    last-level cache (at least 1 GiB), as a model's decode step reads.
 * Times are the thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that other
 * processes on a busy machine inflate them less than wall-clock times; each
 * figure is the best of --reps passes. It also times the quantizer of the
 * activation row at each level (decode runs it on one thread per matmul). A kernel whose "cache" rate is far
 * above the machine's read bandwidth is bound by memory in a model.
 *
 *   bench_x8 [--types q4_k,q5_k,q6_k] [--cols N] [--reps N] [--no-mem]
 *            [--pair] [--tokens N]
 *
 * --pair times the two-group kernels where a level has them. */
#include "base/cpu.h"
#include "gguf/types.h"
#include "tensor/pack.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double thread_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill_rows(uint32_t type, void *w, int64_t n_rows, int64_t n_cols)
{
    size_t rb = strata_type_row_bytes(type, n_cols);
    float *f = malloc((size_t)n_cols * sizeof(float));
    if (!f) abort();
    uint64_t s = 12345;
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t c = 0; c < n_cols; c++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            f[c] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.1f;
        }
        tensor_quantize_row(type, f, (char *)w + (size_t)r * rb, n_cols);
    }
    free(f);
}

static volatile float g_sink;

/* One pass over n_groups groups (pairs where pair != NULL). */
static void pass(const tensor_x8_kernels *k, int use_pair, const char *w, size_t gb,
                 int64_t n_groups, int64_t n_cols, const void *xq, size_t xrb, float *y,
                 int nt)
{
    for (int64_t g = 0; g < n_groups;) {
        if (use_pair && g + 1 < n_groups) {
            k->pair(n_cols, w + (size_t)g * gb, gb, xq, xrb, y + 8 * g, (size_t)(8 * n_groups), nt);
            g += 2;
        } else {
            k->one(n_cols, w + (size_t)g * gb, xq, xrb, y + 8 * g, (size_t)(8 * n_groups), nt);
            g += 1;
        }
    }
}

int main(int argc, char **argv)
{
    const char *types = "q4_k,q5_k,q6_k";
    int64_t n_cols = 2048;
    int reps = 5, mem = 1, use_pair = 0, nt = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--types") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) n_cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-mem")) mem = 0;
        else if (!strcmp(argv[i], "--pair")) use_pair = 1;
        else {
            fprintf(stderr, "usage: bench_x8 [--types q4_k,q5_k,q6_k] [--cols N] [--reps N] "
                            "[--no-mem] [--pair] [--tokens N]\n");
            return 2;
        }
    }
    if (n_cols % 256 != 0 || reps < 1 || nt < 1 || nt > TENSOR_X8_MAX_T) return 2;
    size_t ws = (size_t)1 << 30;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc > 0 && (size_t)llc * 4 > ws) ws = (size_t)llc * 4;

    char cpu_desc[256];
    strata_cpu_describe(cpu_desc, sizeof cpu_desc);
    printf("# cpu: %s\n# %lld columns, %d token(s), %s kernels, best of %d, thread CPU time\n",
           cpu_desc, (long long)n_cols, nt, use_pair ? "pair" : "one-group", reps);
    printf("%-6s %-7s %10s %10s\n", "type", "level", "cache GB/s", "mem GB/s");

    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int ti = strata_type_from_name(tok);
        uint32_t type = (uint32_t)ti;
        if (ti < 0 || tensor_x8_block_elems(type) == 0) {
            fprintf(stderr, "no x8 layout: %s\n", tok);
            continue;
        }
        const int64_t cache_rows = 128;
        size_t rb = strata_type_row_bytes(type, n_cols);
        char *plain = malloc(rb * (size_t)cache_rows);
        size_t pb = tensor_pack_bytes(type, cache_rows, n_cols);
        int64_t n_copies = mem ? (int64_t)(ws / pb) + 1 : 1;
        char *w = aligned_alloc(64, (pb * (size_t)n_copies + 63) / 64 * 64);
        if (!plain || !w) return 1;
        fill_rows(type, plain, cache_rows, n_cols);
        if (tensor_pack(type, plain, cache_rows, n_cols, w) != 0) return 1;
        for (int64_t c = 1; c < n_copies; c++) memcpy(w + (size_t)c * pb, w, pb);
        size_t xrb = tensor_x8_act_row_bytes(type, n_cols);
        char *xq = malloc(xrb * (size_t)nt);
        float *x = malloc((size_t)n_cols * sizeof(float));
        float *y = malloc((size_t)(8 * cache_rows * nt) * sizeof(float));
        if (!xq || !x || !y) return 1;
        for (int64_t i = 0; i < n_cols; i++) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        for (int t = 0; t < nt; t++)
            tensor_x8_act_quant(type, STRATA_SIMD_SCALAR)(x, xq + (size_t)t * xrb, n_cols);
        for (int l = STRATA_SIMD_SCALAR; l <= (int)strata_cpu_level_max(strata_cpu_get()); l++) {
            tensor_quant_fn q = tensor_x8_act_quant(type, (enum strata_simd_level)l);
            double best = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = thread_seconds();
                for (int i = 0; i < 2000; i++) q(x, xq, n_cols);
                double tq = (thread_seconds() - t0) / 2000;
                if (tq < best) best = tq;
            }
            printf("%-6s %-7s activation row: %.2f ns per element\n", tok,
                   strata_simd_level_name((enum strata_simd_level)l), best * 1e9 / (double)n_cols);
        }
        const int64_t n_groups = cache_rows / TENSOR_X8_ROWS;
        const size_t gb = pb / (size_t)n_groups;
        for (int l = STRATA_SIMD_AVX2; l <= (int)strata_cpu_level_max(strata_cpu_get()); l++) {
            const tensor_x8_kernels *k = tensor_x8_kernels_at(type, (enum strata_simd_level)l);
            if (!k || (use_pair && !k->pair)) continue;
            double best_c = 1e30, best_m = 1e30;
            const int inner = (int)(((size_t)256 << 20) / pb); /* ~256 MB per timing */
            for (int r = 0; r < reps; r++) {
                double t0 = thread_seconds();
                for (int i = 0; i < inner; i++)
                    pass(k, use_pair, w, gb, n_groups, n_cols, xq, xrb, y, nt);
                double tc = (thread_seconds() - t0) / inner;
                if (tc < best_c) best_c = tc;
                if (mem) {
                    t0 = thread_seconds();
                    for (int64_t c = 0; c < n_copies; c++)
                        pass(k, use_pair, w + (size_t)c * pb, gb, n_groups, n_cols, xq, xrb, y, nt);
                    double tm = (thread_seconds() - t0) / (double)n_copies;
                    if (tm < best_m) best_m = tm;
                }
            }
            g_sink = y[0];
            printf("%-6s %-7s %10.2f %10.2f\n", tok, l == STRATA_SIMD_AVX2 ? "avx2" : "avx512",
                   (double)pb / best_c * 1e-9, mem ? (double)pb / best_m * 1e-9 : 0.0);
            fflush(stdout);
        }
        free(plain);
        free(w);
        free(xq);
        free(x);
        free(y);
    }
    return 0;
}
