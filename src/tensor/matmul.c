/* tensor_matmul: the traits table (weight type -> activation type and
 * kernel sets per SIMD level) and the driver that quantizes the
 * activations and spreads the (row, token) pairs over the thread pool.
 *
 * Work split. Phase 1 quantizes x, token rows split evenly across threads.
 * Phase 2 splits the weight rows across threads in units of whole tiles
 * (strata_split_range: the same split on every call); each thread walks its
 * rows for all tokens. For n_tok > 1 the tokens are taken in chunks whose
 * quantized activations stay in L2, and inside a chunk tile_r x tile_t
 * tiles reuse each loaded weight block across tile_t tokens; pairs left at
 * the edges go to tile_rows (rows_r x 1) and vec_dot (1 x 1). For n_tok == 1
 * (decode) only tile_rows and vec_dot run.
 *
 * None of these choices changes a result: the kernel sets guarantee that a
 * pair gets the same bits from every shape (matmul_kernels.h). */
#include "tensor/matmul.h"

#include "base/err.h"
#include "gguf/types.h"
#include "tensor/matmul_kernels.h"
#include "tensor/pack_internal.h"
#include "tensor/quant.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* --- traits --- */

typedef struct mm_traits {
    bool supported;
    uint32_t vec_dot_type;                   /* the activations' type */
    const tensor_mm_kernels *k[3];           /* per enum strata_simd_level; NULL: none */
} mm_traits;

#if defined(__x86_64__)
#define X86(p) (p)
#else
#define X86(p) NULL
#endif

/* Types whose kernels exist at every level but AVX-512, and those with all
 * three. */
#define KSET2(t) {[STRATA_SIMD_SCALAR] = &tensor_mmk_##t##_scalar, \
                  [STRATA_SIMD_AVX2] = X86(&tensor_mmk_##t##_avx2)}
#define KSET3(t) {[STRATA_SIMD_SCALAR] = &tensor_mmk_##t##_scalar, \
                  [STRATA_SIMD_AVX2] = X86(&tensor_mmk_##t##_avx2),  \
                  [STRATA_SIMD_AVX512] = X86(&tensor_mmk_##t##_avx512)}

static const mm_traits g_traits[STRATA_TYPE_COUNT] = {
    [STRATA_TYPE_F32] = {.supported = true, .vec_dot_type = STRATA_TYPE_F32, .k = KSET2(f32)},
    [STRATA_TYPE_F16] = {.supported = true, .vec_dot_type = STRATA_TYPE_F32, .k = KSET2(f16)},
    [STRATA_TYPE_BF16] = {.supported = true, .vec_dot_type = STRATA_TYPE_F32, .k = KSET2(bf16)},
    [STRATA_TYPE_Q4_0] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_0, .k = KSET3(q4_0)},
    [STRATA_TYPE_Q4_1] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_1, .k = KSET2(q4_1)},
    [STRATA_TYPE_Q5_0] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_0, .k = KSET3(q5_0)},
    [STRATA_TYPE_Q5_1] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_1, .k = KSET2(q5_1)},
    [STRATA_TYPE_Q8_0] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_0, .k = KSET3(q8_0)},
    [STRATA_TYPE_Q2_K] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(q2_k)},
    [STRATA_TYPE_Q3_K] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(q3_k)},
    [STRATA_TYPE_Q4_K] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(q4_k)},
    [STRATA_TYPE_Q5_K] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(q5_k)},
    [STRATA_TYPE_Q6_K] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(q6_k)},
    [STRATA_TYPE_IQ4_NL] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_0, .k = KSET2(iq4_nl)},
    [STRATA_TYPE_IQ4_XS] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(iq4_xs)},
    [STRATA_TYPE_TQ1_0] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(tq1_0)},
    [STRATA_TYPE_TQ2_0] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET2(tq2_0)},
    [STRATA_TYPE_MXFP4] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_0, .k = KSET2(mxfp4)},
    [STRATA_TYPE_IQ2_XXS] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq2_xxs)},
    [STRATA_TYPE_IQ2_XS] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq2_xs)},
    [STRATA_TYPE_IQ2_S] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq2_s)},
    [STRATA_TYPE_IQ3_XXS] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq3_xxs)},
    [STRATA_TYPE_IQ3_S] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq3_s)},
    [STRATA_TYPE_IQ1_S] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq1_s)},
    [STRATA_TYPE_IQ1_M] = {.supported = true, .vec_dot_type = STRATA_TYPE_Q8_K, .k = KSET3(iq1_m)},
};

const tensor_mm_kernels *tensor_mm_kernels_exact(uint32_t type, enum strata_simd_level level)
{
    if (type >= STRATA_TYPE_COUNT || !g_traits[type].supported) return NULL;
    if ((int)level < STRATA_SIMD_SCALAR || level > STRATA_SIMD_AVX512) return NULL;
    return g_traits[type].k[level];
}

const tensor_mm_kernels *tensor_mm_kernels_at(uint32_t type, enum strata_simd_level level)
{
    if (type >= STRATA_TYPE_COUNT || !g_traits[type].supported) return NULL;
    if (level > STRATA_SIMD_AVX512) level = STRATA_SIMD_AVX512;
    for (int l = (int)level; l >= STRATA_SIMD_SCALAR; l--)
        if (g_traits[type].k[l] != NULL) return g_traits[type].k[l];
    return NULL;
}

/* The process's kernels, resolved once from strata_cpu_level(). */
static const tensor_mm_kernels *g_resolved[STRATA_TYPE_COUNT];
static enum strata_simd_level g_level;
static pthread_once_t g_resolve_once = PTHREAD_ONCE_INIT;

static void resolve_kernels(void)
{
    g_level = strata_cpu_level();
    for (uint32_t t = 0; t < STRATA_TYPE_COUNT; t++)
        g_resolved[t] = tensor_mm_kernels_at(t, g_level);
}

/* Matrix x vector (one token) on the pair kernels, two groups' streams
 * per call, or one group per call. Measured by model decode (llama-1b,
 * 2 threads): on Intel Xeons with AVX-512 (Sapphire and Emerald Rapids
 * class) pairs decode F16 17 %, Q8_0 10 %, Q4_0 6 % faster, and, on the
 * Emerald Rapids one, Q4_K_M 11 %, Q5_K_M 3 % and Q6_K 1-15 % (where the
 * one-group path runs the K-quants' 256-bit kernels); on AMD Zen with
 * AVX-512 two streams per thread ran at about half the memory rate of one.
 * So pairs on Intel CPUs, one group elsewhere; STRATA_DECODE_PAIRS=1 or 0
 * sets it. Either way a pair gets the bits of two one-group calls. */
static bool g_decode_pairs;
static pthread_once_t g_decode_pairs_once = PTHREAD_ONCE_INIT;

static void decode_pairs_init(void)
{
    const char *env = getenv("STRATA_DECODE_PAIRS");
    if (env != NULL && strcmp(env, "1") == 0) g_decode_pairs = true;
    else if (env != NULL && strcmp(env, "0") == 0) g_decode_pairs = false;
    else g_decode_pairs = strcmp(strata_cpu_get()->vendor, "GenuineIntel") == 0;
}

static bool decode_pairs(void)
{
    pthread_once(&g_decode_pairs_once, decode_pairs_init);
    return g_decode_pairs;
}

static bool is_packed(uint32_t type)
{
    return (type & TENSOR_PACKED) != 0 && tensor_x8_block_elems(type & ~TENSOR_PACKED) != 0;
}

bool tensor_matmul_supported(uint32_t type)
{
    if (is_packed(type)) return true;
    return type < STRATA_TYPE_COUNT && g_traits[type].supported;
}

int tensor_matmul_vec_dot_type(uint32_t type)
{
    if (is_packed(type)) type &= ~TENSOR_PACKED;
    return tensor_matmul_supported(type) ? (int)g_traits[type].vec_dot_type : -1;
}

static bool is_float_type(uint32_t type)
{
    return type == STRATA_TYPE_F32 || type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16;
}

size_t tensor_matmul_scratch_bytes(uint32_t type, int64_t n_cols, int64_t n_tok)
{
    if (is_packed(type)) {
        size_t row_bytes = tensor_x8_act_row_bytes(type & ~TENSOR_PACKED, n_cols);
        if (row_bytes == 0 || n_tok <= 0 || (uint64_t)n_tok > SIZE_MAX / row_bytes) return 0;
        return row_bytes * (size_t)n_tok;
    }
    if (!tensor_matmul_supported(type) || is_float_type(type) || n_cols <= 0 || n_tok <= 0)
        return 0;
    size_t row_bytes = strata_type_row_bytes(g_traits[type].vec_dot_type, n_cols);
    if (row_bytes == 0 || strata_type_row_bytes(type, n_cols) == 0) return 0;
    if ((uint64_t)n_tok > SIZE_MAX / row_bytes) return 0;
    return row_bytes * (size_t)n_tok;
}

/* --- the driver --- */

typedef struct mm_ctx {
    const tensor_mm_kernels *k;
    const char *w;           /* (n_rows, n_cols) weights */
    size_t w_row_bytes;
    int64_t n_rows, n_cols, n_tok;
    const float *x;          /* (n_tok, n_cols) float activations */
    tensor_quant_fn quant;   /* NULL: the kernels read x itself */
    char *xq;                /* (n_tok, xq_row_bytes) what the kernels read */
    size_t xq_row_bytes;
    float *y;                /* (n_tok, n_rows) */
    int64_t row_unit;        /* rows per unit of the thread split */
    int64_t tok_chunk;       /* tokens per L2-sized chunk (a multiple of tile_t) */
} mm_ctx;

/* Phase 1 of both drivers: n_tok rows of x into the kernels' activation
 * rows. */
typedef struct quant_job {
    tensor_quant_fn quant;
    const float *x;
    int64_t n_cols, n_tok;
    char *xq;
    size_t xq_row_bytes;
} quant_job;

static void quant_rows(void *arg, int i_thread, int n_threads)
{
    const quant_job *j = arg;
    int64_t t0, t1;
    strata_split_range(j->n_tok, i_thread, n_threads, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        j->quant(j->x + t * j->n_cols, j->xq + (size_t)t * j->xq_row_bytes, j->n_cols);
}

static void quantize_activations(strata_pool *pool, const quant_job *j)
{
    /* a few rows are quantized faster than the pool wakes up */
    if (j->n_tok <= 2 * (pool != NULL ? strata_pool_n_threads(pool) : 1))
        quant_rows((void *)j, 0, 1);
    else
        strata_pool_run(pool, quant_rows, (void *)j);
}

/* Rows [r0, r1) with token t: rows_r at a time, then one at a time. */
static void mm_rows_one_token(const mm_ctx *c, int64_t r0, int64_t r1, int64_t t)
{
    const tensor_mm_kernels *k = c->k;
    const char *xt = c->xq + (size_t)t * c->xq_row_bytes;
    float *yt = c->y + t * c->n_rows;
    int64_t r = r0;
    if (k->tile_rows != NULL)
        for (; r + k->rows_r <= r1; r += k->rows_r)
            k->tile_rows(c->n_cols, c->w + (size_t)r * c->w_row_bytes, c->w_row_bytes, xt,
                         c->xq_row_bytes, yt + r, (size_t)c->n_rows);
    for (; r < r1; r++)
        yt[r] = k->vec_dot(c->n_cols, c->w + (size_t)r * c->w_row_bytes, xt);
}

static void mm_products(void *arg, int i_thread, int n_threads)
{
    const mm_ctx *c = arg;
    const tensor_mm_kernels *k = c->k;
    int64_t n_units = (c->n_rows + c->row_unit - 1) / c->row_unit;
    int64_t u0, u1;
    strata_split_range(n_units, i_thread, n_threads, &u0, &u1);
    int64_t r0 = u0 * c->row_unit;
    int64_t r1 = u1 * c->row_unit < c->n_rows ? u1 * c->row_unit : c->n_rows;
    if (r0 >= r1) return;

    if (c->n_tok == 1 || k->tile == NULL) {
        for (int64_t t = 0; t < c->n_tok; t++)
            mm_rows_one_token(c, r0, r1, t);
        return;
    }
    const int64_t R = k->tile_r, T = k->tile_t;
    for (int64_t tc0 = 0; tc0 < c->n_tok; tc0 += c->tok_chunk) {
        int64_t tc1 = tc0 + c->tok_chunk < c->n_tok ? tc0 + c->tok_chunk : c->n_tok;
        int64_t r = r0;
        for (; r + R <= r1; r += R) {
            const char *wr = c->w + (size_t)r * c->w_row_bytes;
            int64_t t = tc0;
            for (; t + T <= tc1; t += T)
                k->tile(c->n_cols, wr, c->w_row_bytes, c->xq + (size_t)t * c->xq_row_bytes,
                        c->xq_row_bytes, c->y + t * c->n_rows + r, (size_t)c->n_rows);
            for (; t < tc1; t++)
                mm_rows_one_token(c, r, r + R, t);
        }
        for (int64_t t = tc0; t < tc1 && r < r1; t++)
            mm_rows_one_token(c, r, r1, t);
    }
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Quantized activations of one token chunk should stay in L2 while every
 * row tile of the thread passes over them. */
#define MM_CHUNK_BYTES (256 * 1024)

static int mm_run(strata_pool *pool, const tensor_mm_kernels *k, uint32_t type, const void *w,
                  int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok, float *y,
                  void *scratch)
{
    if (!tensor_matmul_supported(type)) return STRATA_EUNSUPPORTED;
    if (k == NULL) return STRATA_EUNSUPPORTED;
    if (n_rows < 0 || n_cols <= 0 || n_tok < 0) return STRATA_EINVAL;
    size_t w_row_bytes = strata_type_row_bytes(type, n_cols);
    if (w_row_bytes == 0) return STRATA_EINVAL; /* not a whole number of blocks */
    if (n_rows == 0 || n_tok == 0) return 0;
    if (w == NULL || x == NULL || y == NULL) return STRATA_EINVAL;
    if ((uint64_t)n_rows > SIZE_MAX / w_row_bytes) return STRATA_EINVAL;

    mm_ctx c = {
        .k = k, .w = w, .w_row_bytes = w_row_bytes,
        .n_rows = n_rows, .n_cols = n_cols, .n_tok = n_tok, .x = x, .y = y,
    };
    if (is_float_type(type)) {
        c.xq = (char *)(uintptr_t)x; /* read only */
        c.xq_row_bytes = (size_t)n_cols * sizeof(float);
    } else {
        if (scratch == NULL) return STRATA_EINVAL;
        c.quant = tensor_get_quant(g_traits[type].vec_dot_type);
        if (c.quant == NULL) return STRATA_EUNSUPPORTED;
        c.xq = scratch;
        c.xq_row_bytes = strata_type_row_bytes(g_traits[type].vec_dot_type, n_cols);
        if (c.xq_row_bytes == 0) return STRATA_EINVAL;
    }
    c.row_unit = (int64_t)k->rows_r * k->tile_r / gcd64(k->rows_r, k->tile_r);
    int64_t chunk = (int64_t)(MM_CHUNK_BYTES / c.xq_row_bytes);
    chunk -= chunk % k->tile_t;
    c.tok_chunk = chunk > k->tile_t ? chunk : k->tile_t;

    if (c.quant != NULL) {
        quant_job qj = {c.quant, x, n_cols, n_tok, c.xq, c.xq_row_bytes};
        quantize_activations(pool, &qj);
    }
    strata_pool_run(pool, mm_products, &c);
    return 0;
}

/* --- packed (x8) matrices: groups of 8 rows, one kernel call per group
 * (or pair of groups, where the level has a pair kernel) and up to max_t
 * tokens --- */

typedef struct x8_ctx {
    const tensor_x8_kernels *k;
    const char *w;
    size_t group_bytes;
    int64_t n_groups, n_cols, n_tok;
    const char *xq;
    size_t xq_row_bytes;
    float *y;
    int64_t tok_chunk;
    int64_t group_unit;      /* groups per unit of work: 2 where pair kernels run */
    int64_t grain;           /* units per claim when claiming (else 0) */
    atomic_int_fast64_t next_unit;
} x8_ctx;

/* Groups [g0, g1) for tokens [tc0, tc1): in pairs where the level has a
 * pair kernel, the odd one left alone. */
static void x8_groups(const x8_ctx *c, int64_t g0, int64_t g1, int64_t tc0, int64_t tc1)
{
    const int64_t n_rows = c->n_groups * TENSOR_X8_ROWS;
    const int max_t = c->k->max_t;
    for (int64_t g = g0; g < g1;) {
        const char *wg = c->w + (size_t)g * c->group_bytes;
        const bool pair = c->group_unit == 2 && g + 1 < g1;
        for (int64_t t = tc0; t < tc1; t += max_t) {
            int nt = tc1 - t < max_t ? (int)(tc1 - t) : max_t;
            const char *xt = c->xq + (size_t)t * c->xq_row_bytes;
            float *yt = c->y + t * n_rows + g * TENSOR_X8_ROWS;
            if (pair)
                c->k->pair(c->n_cols, wg, c->group_bytes, xt, c->xq_row_bytes, yt,
                           (size_t)n_rows, nt);
            else
                c->k->one(c->n_cols, wg, xt, c->xq_row_bytes, yt, (size_t)n_rows, nt);
        }
        g += pair ? 2 : 1;
    }
}

/* With one token chunk (decode, small batches) the threads claim runs of
 * units from a shared counter, so a thread slowed by something else on its
 * CPU does not hold the others at the end; with several chunks each thread
 * keeps a fixed range, so that a chunk's activations stay in its L2 while
 * all its groups pass over them. Which thread computes a group, and whether
 * it runs in a pair, changes no result. */
static void x8_products(void *arg, int i_thread, int n_threads)
{
    x8_ctx *c = arg;
    const int64_t n_units = (c->n_groups + c->group_unit - 1) / c->group_unit;
    if (c->grain > 0) {
        for (;;) {
            int64_t u0 = atomic_fetch_add_explicit(&c->next_unit, c->grain, memory_order_relaxed);
            if (u0 >= n_units) break;
            int64_t u1 = u0 + c->grain < n_units ? u0 + c->grain : n_units;
            int64_t g1 = u1 * c->group_unit < c->n_groups ? u1 * c->group_unit : c->n_groups;
            x8_groups(c, u0 * c->group_unit, g1, 0, c->n_tok);
        }
        return;
    }
    int64_t u0, u1;
    strata_split_range(n_units, i_thread, n_threads, &u0, &u1);
    int64_t g0 = u0 * c->group_unit;
    int64_t g1 = u1 * c->group_unit < c->n_groups ? u1 * c->group_unit : c->n_groups;
    for (int64_t tc0 = 0; tc0 < c->n_tok; tc0 += c->tok_chunk) {
        int64_t tc1 = tc0 + c->tok_chunk < c->n_tok ? tc0 + c->tok_chunk : c->n_tok;
        x8_groups(c, g0, g1, tc0, tc1);
    }
}

static int x8_run(strata_pool *pool, enum strata_simd_level level, uint32_t ptype,
                  const void *w, int64_t n_rows, int64_t n_cols, const float *x, int64_t n_tok,
                  float *y, void *scratch)
{
    const uint32_t type = ptype & ~TENSOR_PACKED;
    if (n_rows < 0 || n_cols <= 0 || n_tok < 0) return STRATA_EINVAL;
    if (n_rows == 0 || n_tok == 0) return 0;
    size_t bytes = tensor_pack_bytes(type, n_rows, n_cols);
    if (bytes == 0) return STRATA_EINVAL;
    if (w == NULL || x == NULL || y == NULL || scratch == NULL) return STRATA_EINVAL;
    /* prefill on AMX's tiles where the CPU has them (the same bits) */
    const tensor_x8_kernels *k = tensor_x8_kernels_for(type, level, n_tok);
    if (k == NULL) return STRATA_EUNSUPPORTED;
    x8_ctx c = {
        .k = k, .w = w, .n_groups = n_rows / TENSOR_X8_ROWS, .n_cols = n_cols,
        .n_tok = n_tok, .xq = scratch, .y = y,
        .xq_row_bytes = tensor_x8_act_row_bytes(type, n_cols),
        /* from two tokens on the pair kernels reuse each activation load
         * for 16 rows; one token (decode): see decode_pairs */
        .group_unit = k->pair != NULL && (n_tok > 1 || decode_pairs()) ? 2 : 1,
    };
    c.group_bytes = bytes / (size_t)c.n_groups;
    /* F16 and BF16 read float activations, 4 bytes per element against
     * about 1 for the int8 types: the same tokens per chunk. Their weights
     * stay in L2 while a chunk's activations stream past; a chunk of 8
     * tokens at 8192 columns re-read the whole matrix every 8 tokens. */
    const size_t chunk_bytes =
        type == STRATA_TYPE_F16 || type == STRATA_TYPE_BF16 ? 4 * MM_CHUNK_BYTES : MM_CHUNK_BYTES;
    int64_t chunk = (int64_t)(chunk_bytes / c.xq_row_bytes);
    chunk -= chunk % k->max_t;
    c.tok_chunk = chunk > k->max_t ? chunk : k->max_t;
    const int n_threads = pool != NULL ? strata_pool_n_threads(pool) : 1;
    if (n_tok <= c.tok_chunk && n_threads > 1) {
        /* about 8 claims per thread: few enough that the counter costs
         * nothing, enough to even out a slow thread */
        const int64_t n_units = (c.n_groups + c.group_unit - 1) / c.group_unit;
        c.grain = n_units / ((int64_t)n_threads * 8);
        if (c.grain < 1) c.grain = 1;
    }
    atomic_init(&c.next_unit, 0);
    quant_job qj = {tensor_x8_act_quant(type, level), x, n_cols, n_tok, scratch, c.xq_row_bytes};
    quantize_activations(pool, &qj);
    strata_pool_run(pool, x8_products, &c);
    return 0;
}

int tensor_matmul(strata_pool *pool, uint32_t type, const void *w, int64_t n_rows,
                  int64_t n_cols, const float *x, int64_t n_tok, float *y, void *scratch)
{
    pthread_once(&g_resolve_once, resolve_kernels);
    if (is_packed(type))
        return x8_run(pool, g_level, type, w, n_rows, n_cols, x, n_tok, y, scratch);
    const tensor_mm_kernels *k = type < STRATA_TYPE_COUNT ? g_resolved[type] : NULL;
    return mm_run(pool, k, type, w, n_rows, n_cols, x, n_tok, y, scratch);
}

int tensor_matmul_at_level(struct strata_pool *pool, enum strata_simd_level level, uint32_t type,
                           const void *w, int64_t n_rows, int64_t n_cols, const float *x,
                           int64_t n_tok, float *y, void *scratch)
{
    /* never run instructions this CPU lacks, whatever the caller asks */
    if ((int)level > (int)strata_cpu_level_max(strata_cpu_get())) return STRATA_EUNSUPPORTED;
    if (is_packed(type))
        return x8_run(pool, level, type, w, n_rows, n_cols, x, n_tok, y, scratch);
    return mm_run(pool, tensor_mm_kernels_at(type, level), type, w, n_rows, n_cols, x, n_tok, y,
                  scratch);
}
