/* The tiled attention loop (model_attention) against the per-token
 * reference (model_attention_ref): bit-identical outputs (memcmp) for
 * random queries and cache rows, over
 *   - a batch that interleaves several sequences: runs that cross block
 *     boundaries and end in a partial block, a run starting mid-block, a
 *     sequence from position 0, a single decode token, and tokens of one
 *     sequence out of order and repeated (no run: tiles of one token);
 *   - GQA groups of 1, 2, 4 and 8 query heads per KV head;
 *   - head sizes 64, 128 and, for F16 rows, 72 and 40 (not multiples of 16);
 *   - F16 and Q8_0 keys and values, and the two mixes;
 *   - blocks of 32 and of 8 positions (tiles then end at every block);
 *   - no pool, and a pool of 3 threads;
 *   - full causal attention, sliding windows of 8 and 40, a soft-cap, sinks;
 *   - every SIMD level of this machine: the test runs itself once per level
 *     with STRATA_CPU set (the level is fixed per process). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"
#include "base/err.h"
#include "base/threadpool.h"
#include "gguf/types.h"
#include "model/attention.h"
#include "model/kv_cache.h"
#include "run.h"
#include "tensor/fp16.h"
#include "tensor/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static float frand(uint32_t *s)
{
    return (float)lcg(s) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* The batch: (sequence, position) per token, sequences interleaved. */
typedef struct tok {
    int32_t seq, pos;
} tok;

static int n_batch(tok *b)
{
    int n = 0;
#define RUN(s, p0, p1)                                            \
    for (int p = (p0); p <= (p1); p++) b[n++] = (tok){(s), p}
    RUN(0, 37, 50);  /* starts mid-block, crosses 48 (bt 8) */
    RUN(1, 0, 9);
    b[n++] = (tok){3, 45};
    RUN(0, 51, 80);  /* crosses 64 */
    b[n++] = (tok){3, 40};
    b[n++] = (tok){3, 41};
    b[n++] = (tok){2, 69}; /* one decode token */
    RUN(1, 10, 19);
    RUN(0, 81, 99);  /* ends in a partial block */
    b[n++] = (tok){3, 49};
    b[n++] = (tok){3, 49};
    b[n++] = (tok){3, 42};
    RUN(1, 20, 20);
#undef RUN
    return n;
}

static const int32_t g_seq_len[4] = {100, 21, 70, 50};

typedef struct cfg {
    int64_t G, hd;
    uint32_t k_type, v_type;
    int bt;
} cfg;

static void fill_row(uint32_t type, uint8_t *row, int64_t n, float mag, uint32_t *seed)
{
    float x[256];
    for (int64_t i = 0; i < n; i++) x[i] = mag * frand(seed);
    if (type == STRATA_TYPE_F16) {
        uint16_t *h = (uint16_t *)(void *)row;
        for (int64_t i = 0; i < n; i++) h[i] = tensor_f32_to_f16(x[i]);
    } else {
        assert_int_equal(tensor_quantize_row(STRATA_TYPE_Q8_0, x, row, n), 0);
    }
}

static void run_cfg(const cfg *c, strata_pool **pools, int n_pools)
{
    const int64_t n_head_kv = 2, n_layer = 2, layer = 1;
    kv_cache_params p = {
        .n_layer = n_layer,
        .n_head_kv = n_head_kv,
        .head_dim = c->hd,
        .head_dim_v = c->hd,
        .n_ctx = 512,
        .n_seq_max = 4,
        .block_tokens = c->bt,
        .k_type = c->k_type,
        .v_type = c->v_type,
    };
    strata_err err = {0};
    kv_cache *kv = NULL;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    uint32_t seed = (uint32_t)(c->G * 131 + c->hd * 7 + c->bt + c->k_type * 3 + c->v_type);
    for (int32_t s = 0; s < 4; s++) {
        assert_int_equal(kv_seq_add(kv, s, &err), 0);
        assert_int_equal(kv_seq_extend(kv, s, g_seq_len[s], &err), 0);
        for (int64_t pos = 0; pos < g_seq_len[s]; pos++) {
            for (int64_t h = 0; h < n_head_kv; h++) {
                /* rows of varying size, so some scores dominate */
                float mag = 0.2f + 3.0f * (float)(lcg(&seed) % 100) / 100.0f;
                fill_row(kv->k_type, kv_k_row(kv, s, layer, pos, h), c->hd, mag, &seed);
                fill_row(kv->v_type, kv_v_row(kv, s, layer, pos, h), c->hd, 1.0f, &seed);
            }
        }
    }
    tok b[256];
    const int n = n_batch(b);
    int32_t seq_ids[256], pos[256];
    for (int i = 0; i < n; i++) {
        seq_ids[i] = b[i].seq;
        pos[i] = b[i].pos;
    }
    const int64_t n_head = n_head_kv * c->G;
    const size_t q_floats = (size_t)n * (size_t)(n_head * c->hd);
    float *q = malloc(q_floats * sizeof(float));
    for (size_t i = 0; i < q_floats; i++) q[i] = frand(&seed) * (i % 97 < 5 ? 8.0f : 1.0f);
    float *out_ref = malloc(q_floats * sizeof(float));
    float *out = malloc(q_floats * sizeof(float));
    const size_t scratch_floats = model_attention_scratch_floats(kv, n_head);
    float *scratch = malloc(4 * scratch_floats * sizeof(float));

    model_attn_args a = {
        .kv = kv,
        .layer = layer,
        .n_tokens = n,
        .seq_ids = seq_ids,
        .pos = pos,
        .q = q,
        .out = out_ref,
        .n_head = n_head,
        .scale = 1.0f / sqrtf((float)c->hd),
        .scratch = scratch,
    };
    /* full causal attention; a window of 8 (tiles that start before their
     * last tokens' windows, blocks of 8 skipped whole); a window of 40
     * with gemma2's soft-cap of 1 and attention sinks */
    const int64_t windows[] = {0, 8, 40};
    const float caps[] = {0.0f, 0.0f, 1.0f};
    float sinks[64];
    for (int h = 0; h < 64; h++) sinks[h] = 2.0f * frand(&seed);
    for (int iv = 0; iv < 3; iv++) {
        a.window = windows[iv];
        a.softcap = caps[iv];
        a.sinks = iv == 2 ? sinks : NULL; /* gpt-oss's sinks with the last */
        a.n_tokens = n;
        a.seq_ids = seq_ids;
        a.pos = pos;
        a.q = q;
        a.out = out_ref;
        memset(out_ref, 0x7f, q_floats * sizeof(float));
        model_attention_ref(NULL, &a);
        for (int ip = 0; ip < n_pools; ip++) {
            a.out = out;
            memset(out, 0x7f, q_floats * sizeof(float));
            model_attention(pools[ip], &a);
            if (memcmp(out, out_ref, q_floats * sizeof(float)) != 0) {
                size_t i = 0;
                while (out[i] == out_ref[i]) i++;
                fail_msg("G=%lld hd=%lld k=%u v=%u bt=%d window=%lld cap=%g threads=%d (level %s): "
                         "token %zu differs "
                         "(%.9g vs %.9g)",
                         (long long)c->G, (long long)c->hd, c->k_type, c->v_type, c->bt,
                         (long long)a.window, (double)a.softcap,
                         strata_pool_n_threads(pools[ip]), strata_simd_level_name(strata_cpu_level()),
                         i / (size_t)(n_head * c->hd), (double)out[i], (double)out_ref[i]);
            }
        }
        /* a single decode token as its own batch, through the tiled entry */
        a.n_tokens = 1;
        a.seq_ids = &seq_ids[n - 1];
        a.pos = &pos[n - 1];
        a.q = q + (size_t)(n - 1) * (size_t)(n_head * c->hd);
        a.out = out;
        model_attention(pools[0], &a);
        assert_memory_equal(out, out_ref + (size_t)(n - 1) * (size_t)(n_head * c->hd),
                            (size_t)(n_head * c->hd) * sizeof(float));
    }

    free(q);
    free(out_ref);
    free(out);
    free(scratch);
    kv_cache_free(kv);
}

static void tiles_equal_reference(void **state)
{
    (void)state;
    strata_pool *pools[2] = {NULL, strata_pool_new(3)};
    assert_non_null(pools[1]);
    const int64_t groups[] = {1, 2, 4, 8};
    const int64_t dims[] = {64, 128, 72, 40};
    const uint32_t types[][2] = {{STRATA_TYPE_F16, STRATA_TYPE_F16},
                                 {STRATA_TYPE_Q8_0, STRATA_TYPE_Q8_0},
                                 {STRATA_TYPE_Q8_0, STRATA_TYPE_F16},
                                 {STRATA_TYPE_F16, STRATA_TYPE_Q8_0}};
    const int bts[] = {32, 8};
    int n_run = 0;
    for (size_t it = 0; it < 4; it++) {
        for (size_t id = 0; id < 4; id++) {
            /* Q8_0 rows need a head size that is a multiple of 32 */
            bool q8 = types[it][0] == STRATA_TYPE_Q8_0 || types[it][1] == STRATA_TYPE_Q8_0;
            if (q8 && dims[id] % 32 != 0) continue;
            for (size_t ig = 0; ig < 4; ig++) {
                for (size_t ib = 0; ib < 2; ib++) {
                    cfg c = {.G = groups[ig], .hd = dims[id], .k_type = types[it][0],
                             .v_type = types[it][1], .bt = bts[ib]};
                    run_cfg(&c, pools, 2);
                    n_run++;
                }
            }
        }
    }
    assert_int_equal(n_run, (4 * 4 + 3 * 2 * 4) * 2);
    strata_pool_free(pools[1]);
}

/* Scores of -inf everywhere (a query of -inf times +inf keys would be NaN;
 * a query of huge values gives +-inf scores): the tiles skip and weight
 * exactly as the reference does. */
static void extreme_scores_equal_reference(void **state)
{
    (void)state;
    kv_cache_params p = {.n_layer = 1, .n_head_kv = 1, .head_dim = 64, .head_dim_v = 64,
                         .n_ctx = 128, .n_seq_max = 1, .k_type = STRATA_TYPE_F16,
                         .v_type = STRATA_TYPE_F16};
    strata_err err = {0};
    kv_cache *kv = NULL;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 0, 70, &err), 0);
    uint32_t seed = 3;
    for (int64_t pos = 0; pos < 70; pos++) {
        fill_row(STRATA_TYPE_F16, kv_k_row(kv, 0, 0, pos, 0), 64, 60000.0f, &seed);
        fill_row(STRATA_TYPE_F16, kv_v_row(kv, 0, 0, pos, 0), 64, 1.0f, &seed);
    }
    const int n = 40;
    int32_t seq_ids[40], pos[40];
    float q[40 * 4 * 64], out[40 * 4 * 64], out_ref[40 * 4 * 64];
    for (int i = 0; i < n; i++) {
        seq_ids[i] = 0;
        pos[i] = 30 + i;
    }
    for (int i = 0; i < n * 4 * 64; i++) q[i] = frand(&seed) * 1e30f;
    for (int i = 0; i < 64; i++) q[5 * 4 * 64 + i] = -INFINITY; /* token 5, head 0 */
    float *scratch = malloc(model_attention_scratch_floats(kv, 4) * sizeof(float));
    model_attn_args a = {.kv = kv, .layer = 0, .n_tokens = n, .seq_ids = seq_ids, .pos = pos,
                         .q = q, .out = out_ref, .n_head = 4, .scale = 0.125f,
                         .scratch = scratch};
    model_attention_ref(NULL, &a);
    a.out = out;
    model_attention(NULL, &a);
    assert_memory_equal(out, out_ref, sizeof out);
    free(scratch);
    kv_cache_free(kv);
}

/* Without STRATA_CPU: run this program again once per level below the
 * machine's (with STRATA_CPU set) and check each passes. */
static void every_level(void **state)
{
    (void)state;
    if (getenv("STRATA_CPU") != NULL) skip();
    enum strata_simd_level max = strata_cpu_level_max(strata_cpu_get());
    for (int level = STRATA_SIMD_SCALAR; level < (int)max; level++) {
        const char *name = strata_simd_level_name((enum strata_simd_level)level);
        assert_int_equal(setenv("STRATA_CPU", name, 1), 0);
        const char *argv[] = {"/proc/self/exe", NULL};
        run_result r;
        assert_int_equal(run_capture(argv, &r), 0);
        if (r.status != 0) {
            fprintf(stderr, "%s%s", r.out, r.err);
            fail_msg("STRATA_CPU=%s: exit %d", name, r.status);
        }
        run_result_free(&r);
        unsetenv("STRATA_CPU");
    }
}

int main(void)
{
    fprintf(stderr, "SIMD level: %s\n", strata_simd_level_name(strata_cpu_level()));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiles_equal_reference),
        cmocka_unit_test(extreme_scores_equal_reference),
        cmocka_unit_test(every_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
