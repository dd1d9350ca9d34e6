/* bench_matmul: throughput of tensor_matmul per weight type.
 *
 * For a Llama-1B FFN-sized matrix (8192 rows x 2048 columns by default):
 *  - matrix x vector (decode, one token): microseconds per call and GB/s of
 *    weights read, with 1 and 2 threads (or --threads), next to the read
 *    bandwidth of this machine measured in the same run (a read loop over a
 *    buffer much larger than the caches, same thread counts);
 *  - prefill: GFLOP/s (2 * rows * cols * tokens per call) for 512 tokens,
 *    and that as a share of this machine's arithmetic peak measured in the
 *    same run: for float weights (F32, F16, BF16) the f32 fma peak, for the
 *    quantized types (whose kernels multiply int8 codes) the int8 dot
 *    product peak, where the level has one (VPDPBUSD at AVX-512 VNNI). A
 *    "FLOP" of a quantized type is then one int8 multiply or add ("OPS").
 *    The peak is a loop of 12 independent fmas (or VPDPBUSDs) per thread
 *    on registers, no loads, the widest vectors of the level: what the
 *    core's vector units issue at the clock they ran at. On AMD Zen 4 that
 *    is one 512-bit fma per cycle (two 256-bit pipes, 32 FLOP/cycle) and
 *    one 512-bit VPDPBUSD per cycle (64 multiply-adds, 128 OPS/cycle); the
 *    clock shown comes from a chain of dependent adds (one cycle each).
 * Types with a row-interleaved layout (tensor/pack.h) get a second line,
 * "Q4_0x8" etc., for the matrix repacked as the model loader does.
 * With bf16 asked for on a CPU with AVX512_BF16, a "BF16dot" line times the
 * VDPBF16PS kernel of the BF16 x8 layout (pack_internal.h; bf16
 * activations, not what tensor_matmul runs), one thread for all columns.
 * Every figure is the median of several calls. Matrix x vector calls
 * rotate over enough copies of the weights to exceed the last-level cache,
 * so they read from memory as a model's decode step does: the working set
 * (of the read loop too) is 4 times the last-level cache, at least 1 GiB.
 *
 *   bench_matmul [--types q4_0,q8_0,...] [--rows N] [--cols N] [--tokens N]
 *                [--threads 1,2] [--reps N] [--no-prefill] [--working-set MB]
 *                [--bandwidth-only]
 *
 * --bandwidth-only measures the read loop and stops (bench/compare.sh
 * measures it beside every model it runs).
 * STRATA_CPU=scalar|avx2|avx512 caps the SIMD level (base/cpu.h). */
#include "base/clock.h"
#include "base/cpu.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "tensor/fp16.h"
#include "tensor/matmul.h"
#include "tensor/pack.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const uint32_t k_types[] = {
    STRATA_TYPE_F32,  STRATA_TYPE_F16,  STRATA_TYPE_BF16, STRATA_TYPE_Q4_0,   STRATA_TYPE_Q4_1,
    STRATA_TYPE_Q5_0, STRATA_TYPE_Q5_1, STRATA_TYPE_Q8_0, STRATA_TYPE_Q2_K,   STRATA_TYPE_Q3_K,
    STRATA_TYPE_Q4_K, STRATA_TYPE_Q5_K, STRATA_TYPE_Q6_K, STRATA_TYPE_IQ4_NL, STRATA_TYPE_IQ4_XS,
    STRATA_TYPE_IQ2_XXS, STRATA_TYPE_IQ2_XS, STRATA_TYPE_IQ2_S, STRATA_TYPE_IQ3_XXS,
    STRATA_TYPE_IQ3_S, STRATA_TYPE_IQ1_S, STRATA_TYPE_IQ1_M, STRATA_TYPE_MXFP4,
    STRATA_TYPE_TQ1_0, STRATA_TYPE_TQ2_0,
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* The working set of the read loop and of the decode calls: 4 times the
 * last-level cache (so that almost every line comes from memory, as in a
 * model's decode step, whose weights are many times the cache), and never
 * below 1 GiB; --working-set MB overrides it. */
#define WORKING_SET_MIN ((size_t)1 << 30)

static size_t default_working_set(void)
{
    size_t ws = WORKING_SET_MIN;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc > 0 && (size_t)llc * 4 > ws) ws = (size_t)llc * 4;
#endif
    return ws;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* --- read bandwidth --- */

typedef struct bw_ctx {
    int variant;
    const uint8_t *buf;
    size_t n_bytes;
    uint64_t sink[64];
} bw_ctx;

#if defined(__x86_64__)
/* Two read loops; the bandwidth reported is the better of the two, the
 * most this machine showed it can stream. Lanes: OR of everything read, so
 * no load can be dropped. */

/* (1) one sequential stream with a software prefetch 2 KB ahead, as the
 * decode kernels read */
__attribute__((target("avx2"))) static uint64_t read_avx2_pf(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)p + i + 2048, _MM_HINT_T0);
        a0 = _mm256_or_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_or_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
    }
    __m256i a = _mm256_or_si256(a0, a1);
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}

/* (2) four streams (the quarters of the range) side by side, left to the
 * hardware prefetcher */
__attribute__((target("avx2"))) static uint64_t read_avx2_4s(const uint8_t *p, size_t n)
{
    size_t q = n / 4 / 64 * 64;
    __m256i a[4];
    for (int k = 0; k < 4; k++) a[k] = _mm256_setzero_si256();
    for (size_t i = 0; i + 64 <= q; i += 64)
        for (int k = 0; k < 4; k++)
            a[k] = _mm256_or_si256(a[k], _mm256_or_si256(
                _mm256_load_si256((const __m256i *)(p + (size_t)k * q + i)),
                _mm256_load_si256((const __m256i *)(p + (size_t)k * q + i + 32))));
    __m256i v = _mm256_or_si256(_mm256_or_si256(a[0], a[1]), _mm256_or_si256(a[2], a[3]));
    return (uint64_t)_mm256_extract_epi64(v, 0) ^ (uint64_t)_mm256_extract_epi64(v, 3);
}
#endif

static uint64_t read_plain(const uint8_t *p, size_t n)
{
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 16 <= n; i += 16) {
        uint64_t u, v;
        memcpy(&u, p + i, 8);
        memcpy(&v, p + i + 8, 8);
        a |= u;
        b |= v;
    }
    return a ^ b;
}

static void bw_worker(void *arg, int i_thread, int n_threads)
{
    bw_ctx *c = arg;
    int64_t n_lines = (int64_t)(c->n_bytes / 128), l0, l1;
    strata_split_range(n_lines, i_thread, n_threads, &l0, &l1);
    const uint8_t *p = c->buf + (size_t)l0 * 128;
    size_t n = (size_t)(l1 - l0) * 128;
#if defined(__x86_64__)
    if (strata_cpu_level() >= STRATA_SIMD_AVX2) {
        c->sink[i_thread % 64] += c->variant ? read_avx2_4s(p, n) : read_avx2_pf(p, n);
        return;
    }
#endif
    c->sink[i_thread % 64] += read_plain(p, n);
}

/* GB/s of a read over a buffer of `n_bytes`: the better of the two loops,
 * each the median of reps. */
static double measure_bandwidth(strata_pool *pool, const uint8_t *buf, size_t n_bytes, int reps)
{
    double best = 0;
    for (int variant = 0; variant < 2; variant++) {
        bw_ctx c = {.variant = variant, .buf = buf, .n_bytes = n_bytes};
        double t[64];
        strata_pool_run(pool, bw_worker, &c); /* warm up */
        for (int r = 0; r < reps; r++) {
            int64_t t0 = strata_clock_ns();
            strata_pool_run(pool, bw_worker, &c);
            t[r] = (double)(strata_clock_ns() - t0) * 1e-9;
        }
        if (c.sink[0] == 42) fputc(' ', stderr); /* keep the reads */
        double gbs = (double)n_bytes / median(t, reps) * 1e-9;
        if (gbs > best) best = gbs;
    }
    return best;
}

/* --- arithmetic peak --- */

enum { PEAK_F32 = 0, PEAK_INT8 = 1, PEAK_CLOCK = 2 };

typedef struct peak_ctx {
    int kind;
    uint64_t iters;
    double sink[64];
    double cpu_s[64]; /* each thread's CPU time in the loop */
} peak_ctx;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
/* 12 independent chains: enough to cover the fma latency (4 cycles) on
 * two pipes. Each starts from its own value (init(k)), so that the
 * compiler cannot merge them, and the results are summed so that none can
 * be dropped. */
#define PEAK_CHAINS(T, init, op)                                                              \
    T a0 = init(0), a1 = init(1), a2 = init(2), a3 = init(3), a4 = init(4), a5 = init(5),     \
      a6 = init(6), a7 = init(7), a8 = init(8), a9 = init(9), a10 = init(10), a11 = init(11); \
    for (uint64_t i = 0; i < iters; i++) {                                                    \
        a0 = op(a0); a1 = op(a1); a2 = op(a2); a3 = op(a3); a4 = op(a4); a5 = op(a5);         \
        a6 = op(a6); a7 = op(a7); a8 = op(a8); a9 = op(a9); a10 = op(a10); a11 = op(a11);     \
    }

__attribute__((target("avx2,fma"))) static double peak_fma256(uint64_t iters)
{
    const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
#define FMA256(a) _mm256_fmadd_ps(a, m, c)
#define INIT256(k) _mm256_set1_ps(0.01f * (float)(k))
    PEAK_CHAINS(__m256, INIT256, FMA256)
#undef INIT256
#undef FMA256
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                      _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))));
    float p[8];
    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    return (double)o[0] + (double)p[0];
}

__attribute__((target("avx512f"))) static double peak_fma512(uint64_t iters)
{
    const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
#define FMA512(a) _mm512_fmadd_ps(a, m, c)
#define INIT512(k) _mm512_set1_ps(0.01f * (float)(k))
    PEAK_CHAINS(__m512, INIT512, FMA512)
#undef INIT512
#undef FMA512
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return (double)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f,avx512vnni"))) static double peak_vnni512(uint64_t iters)
{
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(5);
#define DP512(a) _mm512_dpbusd_epi32(a, u, v)
#define INITI(k) _mm512_set1_epi32(k)
    PEAK_CHAINS(__m512i, INITI, DP512)
#undef INITI
#undef DP512
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                 _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    return (double)_mm512_reduce_add_epi32(s);
}

/* 4 dependent adds per iteration: one cycle each. */
static double clock_chain(uint64_t iters)
{
    uint64_t a = 0;
    for (uint64_t i = 0; i < iters; i++)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(a));
    return (double)a;
}
#endif

static void peak_worker(void *arg, int i_thread, int n_threads)
{
    (void)n_threads;
    peak_ctx *c = arg;
    double r = 0;
    const double t0 = thread_cpu_s();
#if defined(__x86_64__)
    const bool avx512 = strata_cpu_level() >= STRATA_SIMD_AVX512;
    if (c->kind == PEAK_CLOCK) r = clock_chain(c->iters);
    else if (c->kind == PEAK_INT8) r = peak_vnni512(c->iters);
    else r = avx512 ? peak_fma512(c->iters) : peak_fma256(c->iters);
#else
    (void)c;
#endif
    c->sink[i_thread % 64] += r;
    c->cpu_s[i_thread % 64] = thread_cpu_s() - t0;
}

/* Operations per second of `kind` (PEAK_CLOCK: cycles per second of one
 * thread), summed over the threads of the pool: each thread's operations
 * over its own CPU time, so that time the thread spent descheduled on a
 * loaded machine does not count; the best of 3 runs of about 0.1 s. */
static double measure_peak(strata_pool *pool, int kind)
{
#if defined(__x86_64__)
    const bool avx512 = strata_cpu_level() >= STRATA_SIMD_AVX512;
    /* operations per chain step: 16 or 8 lanes x 2 (fma), 64 x 2 (int8) */
    const double per_step = kind == PEAK_CLOCK ? 4.0
                            : kind == PEAK_INT8 ? 128.0
                            : (avx512 ? 32.0 : 16.0);
    const double chains = kind == PEAK_CLOCK ? 1.0 : 12.0;
    const uint64_t iters = kind == PEAK_CLOCK ? 50000000 : 10000000;
    const int n_threads = kind == PEAK_CLOCK ? 1 : strata_pool_n_threads(pool);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        peak_ctx c = {.kind = kind, .iters = iters};
        if (kind == PEAK_CLOCK) peak_worker(&c, 0, 1);
        else strata_pool_run(pool, peak_worker, &c);
        if (c.sink[0] == 42) fputc(' ', stderr);
        double ops = 0;
        for (int t = 0; t < n_threads && t < 64; t++)
            if (c.cpu_s[t] > 0) ops += per_step * chains * (double)iters / c.cpu_s[t];
        if (ops > best) best = ops;
    }
    return best;
#else
    (void)pool;
    (void)kind;
    return 0;
#endif
}

/* --- weights --- */

/* The 1-3 bit IQ types, the ternary ones and MXFP4 have no quantizer
 * here: their rows are random codes, each block's f16 scale (leading; the
 * ternary types' trailing; IQ1_M's spread over its scales) set to 1/64,
 * MXFP4's exponent to 1, so that no sum overflows to inf or NaN. */
static bool random_codes(uint32_t type)
{
    switch (type) {
    case STRATA_TYPE_IQ2_XXS:
    case STRATA_TYPE_IQ2_XS:
    case STRATA_TYPE_IQ2_S:
    case STRATA_TYPE_IQ3_XXS:
    case STRATA_TYPE_IQ3_S:
    case STRATA_TYPE_IQ1_S:
    case STRATA_TYPE_IQ1_M:
    case STRATA_TYPE_MXFP4:
    case STRATA_TYPE_TQ1_0:
    case STRATA_TYPE_TQ2_0: return true;
    default: return false;
    }
}

static void fill_random_codes(uint32_t type, char *row, size_t rb, int64_t n_cols, uint64_t *s)
{
    for (size_t i = 0; i < rb; i++) {
        *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
        row[i] = (char)(*s >> 56);
    }
    if (type == STRATA_TYPE_MXFP4) {
        for (size_t b = 0; b < rb; b += 17) row[b] = (char)127; /* 2^0 */
        return;
    }
    const size_t bb = rb / (size_t)(n_cols / 256);
    for (size_t b = 0; b < rb; b += bb) {
        const uint16_t d = 0x2400; /* 1/64 */
        if (type == STRATA_TYPE_TQ1_0 || type == STRATA_TYPE_TQ2_0) {
            memcpy(row + b + bb - 2, &d, 2);
        } else if (type == STRATA_TYPE_IQ1_M) { /* d's nibbles top each 16-bit scale word */
            for (int k = 0; k < 4; k++) {
                uint16_t v;
                memcpy(&v, row + b + bb - 8 + 2 * k, 2);
                v = (uint16_t)((v & 0x0fff) | (((d >> (4 * k)) & 15) << 12));
                memcpy(row + b + bb - 8 + 2 * k, &v, 2);
            }
        } else {
            memcpy(row + b, &d, 2);
        }
    }
}

/* A (n_rows, n_cols) matrix of `type`: 64 distinct quantized rows of
 * Gaussian values (random codes where the type has no quantizer),
 * repeated (speed does not depend on the values). */
static void fill_weights(uint32_t type, void *w, int64_t n_rows, int64_t n_cols)
{
    size_t rb = strata_type_row_bytes(type, n_cols);
    float *f = malloc((size_t)n_cols * sizeof(float));
    if (!f) abort();
    uint64_t s = 12345;
    for (int64_t r = 0; r < n_rows; r++) {
        if (r < 64 && random_codes(type)) {
            fill_random_codes(type, (char *)w + (size_t)r * rb, rb, n_cols, &s);
        } else if (r < 64) {
            for (int64_t c = 0; c < n_cols; c++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                f[c] = ((float)(s >> 40) / 16777216.0f - 0.5f) * 0.1f;
            }
            tensor_quantize_row(type, f, (char *)w + (size_t)r * rb, n_cols);
        } else {
            memcpy((char *)w + (size_t)r * rb, (char *)w + (size_t)(r % 64) * rb, rb);
        }
    }
    free(f);
}

#if defined(__x86_64__)
/* All groups of a packed BF16 matrix x n_tok tokens by the VDPBF16PS
 * kernel, one thread, in tiles of its most tokens. */
static void bf16_dot_all(const char *w, size_t group_bytes, int64_t n_rows, int64_t n_cols,
                         const char *xq, size_t xb, int64_t n_tok, float *y)
{
    for (int64_t g = 0; g < n_rows / TENSOR_X8_ROWS; g++)
        for (int64_t t = 0; t < n_tok; t += TENSOR_X8_BF16_DOT_MAX_T) {
            int nt = n_tok - t < TENSOR_X8_BF16_DOT_MAX_T ? (int)(n_tok - t)
                                                              : TENSOR_X8_BF16_DOT_MAX_T;
            tensor_x8_bf16_dot_avx512bf16(n_cols, w + (size_t)g * group_bytes,
                                          xq + (size_t)t * xb, xb, y + t * n_rows + 8 * g,
                                          (size_t)n_rows, nt);
        }
}

static void bench_bf16_dot(int64_t n_rows, int64_t n_cols, int64_t n_tok, int reps,
                           size_t working_set, const float *x, float *y, int prefill)
{
    const uint32_t type = STRATA_TYPE_BF16;
    size_t rb = strata_type_row_bytes(type, n_cols), w_bytes = tensor_pack_bytes(type, n_rows, n_cols);
    int n_copies = (int)((working_set + w_bytes - 1) / w_bytes);
    if (n_copies < 2) n_copies = 2;
    char *w = aligned_alloc(64, (w_bytes * (size_t)n_copies + 63) / 64 * 64);
    char *plain = aligned_alloc(64, (rb * (size_t)n_rows + 63) / 64 * 64);
    size_t xb = tensor_x8_bf16_dot_act_bytes(n_cols);
    char *xq = malloc(xb * (size_t)n_tok);
    if (!w || !plain || !xq) abort();
    fill_weights(type, plain, n_rows, n_cols);
    if (tensor_pack(type, plain, n_rows, n_cols, w) != 0) abort();
    free(plain);
    for (int c = 1; c < n_copies; c++) memcpy(w + (size_t)c * w_bytes, w, w_bytes);
    for (int64_t t = 0; t < n_tok; t++)
        tensor_x8_bf16_dot_act(x + t * n_cols, xq + (size_t)t * xb, n_cols);
    const size_t gb = w_bytes / (size_t)(n_rows / TENSOR_X8_ROWS);
    printf("%-7s %-9.1f", "BF16dot", (double)w_bytes / 1e6);
    double t[64];
    int copy = 0;
    for (int r = -2; r < reps; r++) {
        int64_t t0 = strata_clock_ns();
        tensor_x8_bf16_dot_act(x, xq, n_cols); /* decode quantizes its one row too */
        bf16_dot_all(w + (size_t)copy * w_bytes, gb, n_rows, n_cols, xq, xb, 1, y);
        if (r >= 0) t[r] = (double)(strata_clock_ns() - t0) * 1e-9;
        copy = (copy + 1) % n_copies;
    }
    double s = median(t, reps), gbs = (double)w_bytes / s * 1e-9;
    printf(" | %11.1f %6.2f (1 thread)", s * 1e6, gbs);
    if (prefill) {
        int preps = reps < 5 ? reps : 5;
        for (int r = 0; r < preps; r++) {
            int64_t t0 = strata_clock_ns();
            bf16_dot_all(w, gb, n_rows, n_cols, xq, xb, n_tok, y);
            t[r] = (double)(strata_clock_ns() - t0) * 1e-9;
        }
        s = median(t, preps);
        printf(" | prefill %.1f GFLOP/s (1 thread)",
               2.0 * (double)n_rows * (double)n_cols * (double)n_tok / s * 1e-9);
    }
    printf("\n");
    free(xq);
    free(w);
}
#endif

static void usage(void)
{
    fprintf(stderr, "usage: bench_matmul [--types q4_0,q8_0,...] [--rows N] [--cols N] [--tokens N]\n"
                    "                    [--threads 1,2] [--reps N] [--no-prefill] [--working-set MB]\n"
                    "                    [--bandwidth-only]\n");
}

int main(int argc, char **argv)
{
    int64_t n_rows = 8192, n_cols = 2048, n_tok = 512;
    int threads[8] = {1, 2}, n_threads_list = 2, reps = 15, prefill = 1, bw_only = 0;
    size_t working_set = default_working_set();
    bool want[STRATA_TYPE_COUNT];
    for (size_t i = 0; i < STRATA_TYPE_COUNT; i++) want[i] = false;
    for (size_t i = 0; i < N_TYPES; i++) want[k_types[i]] = true;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--types") && v) {
            for (size_t t = 0; t < STRATA_TYPE_COUNT; t++) want[t] = false;
            char *list = strdup(v), *save = NULL;
            for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                int t = strata_type_from_name(tok);
                if (t < 0 || !tensor_matmul_supported((uint32_t)t)) {
                    fprintf(stderr, "unknown or unsupported type %s\n", tok);
                    return 2;
                }
                want[t] = true;
            }
            free(list);
            i++;
        } else if (!strcmp(a, "--rows") && v) n_rows = atoll(argv[++i]);
        else if (!strcmp(a, "--cols") && v) n_cols = atoll(argv[++i]);
        else if (!strcmp(a, "--tokens") && v) n_tok = atoll(argv[++i]);
        else if (!strcmp(a, "--reps") && v) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v) {
            n_threads_list = 0;
            char *list = strdup(v), *save = NULL;
            for (char *tok = strtok_r(list, ",", &save); tok && n_threads_list < 8; tok = strtok_r(NULL, ",", &save))
                threads[n_threads_list++] = atoi(tok);
            free(list);
            i++;
        } else if (!strcmp(a, "--no-prefill")) prefill = 0;
        else if (!strcmp(a, "--bandwidth-only")) bw_only = 1;
        else if (!strcmp(a, "--working-set") && v) {
            long long mb = atoll(argv[++i]);
            if (mb < 1 || mb > (1 << 20)) {
                usage();
                return 2;
            }
            working_set = (size_t)mb << 20;
        }
        else {
            usage();
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || n_rows < 1 || n_cols < 1 || n_tok < 1 || n_threads_list < 1) {
        usage();
        return 2;
    }

    char cpu_desc[256];
    strata_cpu_describe(cpu_desc, sizeof cpu_desc);
    printf("# reproduce:");
    if (getenv("STRATA_CPU")) printf(" STRATA_CPU=%s", getenv("STRATA_CPU"));
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\n# cpu: %s\n", cpu_desc);
    printf("# matrix %lld x %lld; prefill %lld tokens; median of %d calls\n", (long long)n_rows,
           (long long)n_cols, (long long)n_tok, reps);

    strata_pool *pools[8];
    for (int p = 0; p < n_threads_list; p++) {
        pools[p] = strata_pool_new(threads[p]);
        if (!pools[p]) {
            fprintf(stderr, "cannot make a pool of %d threads\n", threads[p]);
            return 1;
        }
    }

    /* memory read bandwidth, per thread count */
    printf("# working set of the read loop and the decode calls: %.0f MB\n",
           (double)working_set / 1e6);
    size_t bw_bytes = working_set;
    uint8_t *bw_buf = aligned_alloc(64, bw_bytes);
    if (!bw_buf) return 1;
    memset(bw_buf, 1, bw_bytes);
    double bw[8];
    for (int p = 0; p < n_threads_list; p++) {
        bw[p] = measure_bandwidth(pools[p], bw_buf, bw_bytes, 5);
        printf("# read bandwidth, %d thread(s): %.2f GB/s\n", threads[p], bw[p]);
    }
    free(bw_buf);
    if (bw_only) {
        for (int p = 0; p < n_threads_list; p++) strata_pool_free(pools[p]);
        return 0;
    }

    /* arithmetic peak of the prefill thread count (the last one) */
    strata_pool *ppool = pools[n_threads_list - 1];
    const int pthreads = threads[n_threads_list - 1];
    const double ghz = measure_peak(ppool, PEAK_CLOCK) * 1e-9;
    const double peak_f32 = measure_peak(ppool, PEAK_F32);
#if defined(__x86_64__)
    const bool have_vnni = strata_cpu_level() >= STRATA_SIMD_AVX512 && strata_cpu_get()->avx512vnni;
#else
    const bool have_vnni = false;
#endif
    const double peak_int8 = have_vnni ? measure_peak(ppool, PEAK_INT8) : 0;
    if (peak_f32 > 0)
        printf("# arithmetic peak, %d thread(s), clock %.2f GHz: f32 fma %.1f GFLOP/s (%.1f "
               "FLOP/cycle/core)", pthreads, ghz, peak_f32 * 1e-9,
               peak_f32 / pthreads / (ghz * 1e9));
    if (peak_int8 > 0)
        printf(", int8 VPDPBUSD %.1f GOPS (%.1f OPS/cycle/core)", peak_int8 * 1e-9,
               peak_int8 / pthreads / (ghz * 1e9));
    if (peak_f32 > 0) printf("\n");

    printf("\n%-7s %-9s", "type", "MB");
    for (int p = 0; p < n_threads_list; p++)
        printf(" | %2dT us/call  GB/s  %%bw", threads[p]);
    if (prefill) printf(" | prefill GFLOP/s (%dT) %%peak", threads[n_threads_list - 1]);
    printf("\n");

    float *x = malloc((size_t)(n_tok * n_cols) * sizeof(float));
    float *y = malloc((size_t)(n_tok * n_rows) * sizeof(float));
    if (!x || !y) return 1;
    for (int64_t i = 0; i < n_tok * n_cols; i++) x[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;

    for (size_t vi = 0; vi < 2 * N_TYPES; vi++) {
        /* each type in the file's layout, then (where it has one) in the
         * row-interleaved x8 layout the model loader repacks it to */
        uint32_t type = k_types[vi / 2];
        const bool packed = vi % 2 == 1;
        if (!want[type]) continue;
        if (packed && !tensor_pack_available(type, n_rows, n_cols)) continue;
        size_t rb = strata_type_row_bytes(type, n_cols);
        if (rb == 0) continue;
        size_t w_bytes = packed ? tensor_pack_bytes(type, n_rows, n_cols) : rb * (size_t)n_rows;
        int n_copies = (int)((working_set + w_bytes - 1) / w_bytes);
        if (n_copies < 2) n_copies = 2;
        char *w = aligned_alloc(64, (w_bytes * (size_t)n_copies + 63) / 64 * 64);
        if (!w) return 1;
        if (packed) {
            char *plain = aligned_alloc(64, (rb * (size_t)n_rows + 63) / 64 * 64);
            if (!plain) return 1;
            fill_weights(type, plain, n_rows, n_cols);
            int prc = tensor_pack(type, plain, n_rows, n_cols, w);
            free(plain);
            if (prc != 0) {
                free(w);
                continue;
            }
            type |= TENSOR_PACKED;
        } else {
            fill_weights(type, w, n_rows, n_cols);
        }
        for (int c = 1; c < n_copies; c++) memcpy(w + (size_t)c * w_bytes, w, w_bytes);
        size_t sb = tensor_matmul_scratch_bytes(type, n_cols, n_tok);
        void *scratch = sb ? malloc(sb) : NULL;

        char label[32];
        snprintf(label, sizeof label, "%s%s", strata_type_name(type & ~TENSOR_PACKED),
                 packed ? "x8" : "");
        printf("%-7s %-9.1f", label, (double)w_bytes / 1e6);
        fflush(stdout);
        for (int p = 0; p < n_threads_list; p++) {
            double t[64];
            int copy = 0;
            for (int r = -2; r < reps; r++) { /* two warm-up calls */
                int64_t t0 = strata_clock_ns();
                tensor_matmul(pools[p], type, w + (size_t)copy * w_bytes, n_rows, n_cols, x, 1, y, scratch);
                if (r >= 0) t[r] = (double)(strata_clock_ns() - t0) * 1e-9;
                copy = (copy + 1) % n_copies;
            }
            double s = median(t, reps);
            double gbs = (double)w_bytes / s * 1e-9;
            printf(" | %11.1f %6.2f %4.0f%%", s * 1e6, gbs, 100.0 * gbs / bw[p]);
            fflush(stdout);
        }
        if (prefill) {
            int preps = reps < 5 ? reps : 5;
            double t[64];
            strata_pool *pool = pools[n_threads_list - 1];
            tensor_matmul(pool, type, w, n_rows, n_cols, x, n_tok, y, scratch);
            for (int r = 0; r < preps; r++) {
                int64_t t0 = strata_clock_ns();
                tensor_matmul(pool, type, w, n_rows, n_cols, x, n_tok, y, scratch);
                t[r] = (double)(strata_clock_ns() - t0) * 1e-9;
            }
            double s = median(t, preps);
            const double ops = 2.0 * (double)n_rows * (double)n_cols * (double)n_tok / s;
            const uint32_t plain = type & ~TENSOR_PACKED;
            const bool is_float = plain == STRATA_TYPE_F32 || plain == STRATA_TYPE_F16 ||
                                  plain == STRATA_TYPE_BF16;
            const double peak = is_float ? peak_f32 : peak_int8;
            printf(" | %8.1f", ops * 1e-9);
            if (peak > 0) printf(" %4.0f%%", 100.0 * ops / peak);
        }
        printf("\n");
        free(scratch);
        free(w);
    }
#if defined(__x86_64__)
    if (want[STRATA_TYPE_BF16] && strata_cpu_get()->avx512bf16 &&
        strata_cpu_level() >= STRATA_SIMD_AVX512 && n_cols % TENSOR_X8_HALF_ELEMS == 0 &&
        n_rows % TENSOR_X8_ROWS == 0)
        bench_bf16_dot(n_rows, n_cols, n_tok, reps, working_set, x, y, prefill);
#endif
    for (int p = 0; p < n_threads_list; p++) strata_pool_free(pools[p]);
    free(x);
    free(y);
    return 0;
}
