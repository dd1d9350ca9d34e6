/* Sliding-window layers in the KV cache (kv_cache.h, "Sliding windows"):
 * the window pool stays bounded however long a sequence grows, the rows a
 * window can still see survive, truncation within the slack keeps them and
 * a cut further back empties the sequence; and on a real gemma3 model
 * (a window of 8 on layer 0): the window blocks in use stay bounded over
 * 1000 positions in chunks of 7, a speculative rollback gives the same
 * logits as a straight run, going back past the held window is refused,
 * and the prefix cache goes on from a chain's end (whose window it keeps)
 * with the cold logits, and from nothing else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/kv_prefix.h"
#include "model/model.h"
#include "model_testutil.h"

#include <stdlib.h>
#include <string.h>

/* layers 0 and 2 slide, 1 sees everything */
static const uint8_t k_swa[3] = {1, 0, 1};

static kv_cache *make(int64_t n_ctx, int n_seq, int64_t window, int64_t chunk)
{
    kv_cache_params p = {.n_layer = 3, .n_head_kv = 2, .head_dim = 16, .head_dim_v = 16,
                         .n_ctx = n_ctx, .n_seq_max = n_seq, .n_swa = window,
                         .layer_swa = k_swa, .swa_batch = chunk};
    kv_cache *kv = NULL;
    strata_err err;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    return kv;
}

/* A row's first two bytes name its (layer, position). */
static void put(kv_cache *kv, int32_t seq, int64_t layer, int64_t pos)
{
    uint8_t *k = kv_k_row(kv, seq, layer, pos, 1);
    k[0] = (uint8_t)(layer * 31 + pos);
    k[1] = (uint8_t)(pos >> 8);
}

static void check(const kv_cache *kv, int32_t seq, int64_t layer, int64_t pos)
{
    const uint8_t *k = kv_k_row(kv, seq, layer, pos, 1);
    if (k[0] != (uint8_t)(layer * 31 + pos) || k[1] != (uint8_t)(pos >> 8)) {
        fail_msg("layer %lld position %lld: row lost", (long long)layer, (long long)pos);
    }
}

static void test_sizing(void **state)
{
    (void)state;
    kv_cache *kv = make(4096, 2, 64, 16);
    assert_int_equal(kv->n_layer_full, 1);
    assert_int_equal(kv->n_layer_swa, 2);
    /* per sequence: (64 + 32 slack + 16 chunk) / 32 rounded up, + 2 */
    assert_int_equal(kv->w_n_blocks, 2 * (4 + 2));
    kv_cache_params p = {.n_layer = 3, .n_head_kv = 2, .head_dim = 16, .head_dim_v = 16,
                         .n_ctx = 4096, .n_seq_max = 2, .n_swa = 64, .layer_swa = k_swa,
                         .swa_batch = 16};
    const size_t block = 2 * 32 * 16 * 2 * 2; /* k and v rows of one (layer, block) */
    assert_int_equal(kv_cache_pool_bytes(&p), (1 * 128 + 2 * 12) * block);
    assert_int_equal(kv_cache_bytes(kv), (1 * 128 + 2 * 12) * block);
    assert_int_equal(kv_main_block_bytes(kv), block);
    kv_cache_free(kv);

    /* without window layers: as before, one pool of every layer */
    p.layer_swa = NULL;
    assert_int_equal(kv_cache_pool_bytes(&p), 3 * 128 * block);
}

/* A long sequence, grown a chunk at a time: the window blocks in use stay
 * bounded while the main pool grows; the window's rows survive. */
static void test_bounded(void **state)
{
    (void)state;
    const int64_t window = 64, chunk = 16;
    kv_cache *kv = make(4096, 2, window, chunk);
    strata_err err;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    int32_t max_used = 0;
    for (int64_t p0 = 0; p0 < 3000; p0 += chunk) {
        assert_int_equal(kv_seq_extend(kv, 0, p0 + chunk, &err), 0);
        for (int64_t p = p0; p < p0 + chunk; p++) {
            for (int64_t l = 0; l < 3; l++) put(kv, 0, l, p);
        }
        /* what the next chunk's first query sees, in every layer */
        int64_t lo = p0 + chunk - window + 1;
        for (int64_t p = lo > 0 ? lo : 0; p < p0 + chunk; p++) {
            for (int64_t l = 0; l < 3; l++) check(kv, 0, l, p);
        }
        if (kv_window_blocks_used(kv) > max_used) max_used = kv_window_blocks_used(kv);
    }
    check(kv, 0, 1, 0); /* the full layer keeps everything */
    assert_true(max_used <= 6);
    assert_int_equal(kv_seq_len(kv, 0), 3008);
    assert_int_equal(kv->n_blocks - kv->n_free, 3008 / 32);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_window_blocks_used(kv), 0);
    assert_int_equal(kv->n_free, kv->n_blocks);
    kv_cache_free(kv);
}

/* Rollback within the slack keeps the window; further back empties. */
static void test_truncate(void **state)
{
    (void)state;
    const int64_t window = 64, chunk = 16;
    kv_cache *kv = make(4096, 1, window, chunk);
    strata_err err;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    for (int64_t p0 = 0; p0 < 400; p0 += chunk) {
        assert_int_equal(kv_seq_extend(kv, 0, p0 + chunk, &err), 0);
        for (int64_t p = p0; p < p0 + chunk; p++) {
            for (int64_t l = 0; l < 3; l++) put(kv, 0, l, p);
        }
    }
    /* a draft of up to 16 rejected: the window of 390 is held */
    assert_true(kv_seq_can_truncate(kv, 0, 390));
    kv_seq_truncate(kv, 0, 390);
    assert_int_equal(kv_seq_len(kv, 0), 390);
    for (int64_t p = 390 - window + 1; p < 390; p++) check(kv, 0, 0, p);
    assert_int_equal(kv_seq_extend(kv, 0, 400, &err), 0);
    for (int64_t p = 390; p < 400; p++) {
        for (int64_t l = 0; l < 3; l++) put(kv, 0, l, p);
    }
    for (int64_t p = 400 - window + 1; p < 400; p++) check(kv, 0, 2, p);
    /* 300 would need positions from 237: given back long ago */
    assert_false(kv_seq_can_truncate(kv, 0, 300));
    kv_seq_truncate(kv, 0, 300);
    assert_int_equal(kv_seq_len(kv, 0), 0);
    assert_int_equal(kv_window_blocks_used(kv), 0);
    assert_int_equal(kv->n_free, kv->n_blocks);
    kv_cache_free(kv);
}

/* ---- on the gemma3 golden model ---- */

static int32_t *load_ids(int64_t *n)
{
    char path[4096];
    TESTDATA_FILE(path, "golden/long/seqlong.txt");
    int32_t *ids = mt_read_ids(path, n);
    assert_non_null(ids);
    return ids;
}

/* Feeds ids[p0, p1) to seq in chunks of `chunk`, logits of every position
 * into logits + p0 * n_vocab (NULL: none); returns the largest count of
 * window blocks in use after a chunk. */
static int32_t feed(model_ctx *ctx, int32_t seq, const int32_t *ids, int64_t p0, int64_t p1,
                    int64_t chunk, float *logits, int64_t n_vocab)
{
    kv_cache *kv = model_ctx_kv(ctx);
    int32_t max_used = 0;
    int32_t seqs[64], pos[64];
    int8_t want[64];
    assert_true(chunk <= 64);
    for (int64_t off = p0; off < p1; off += chunk) {
        int64_t n = p1 - off < chunk ? p1 - off : chunk;
        for (int64_t i = 0; i < n; i++) {
            seqs[i] = seq;
            pos[i] = (int32_t)(off + i);
            want[i] = logits != NULL;
        }
        model_batch b = {.n_tokens = n, .tokens = ids + off, .seq_ids = seqs, .pos = pos,
                         .want_logits = want};
        strata_err err;
        float *dst = logits != NULL ? logits + (size_t)off * (size_t)n_vocab : NULL;
        if (model_forward(ctx, &b, dst, &err) != 0) fail_msg("model_forward: %s", err.msg);
        if (kv_window_blocks_used(kv) > max_used) max_used = kv_window_blocks_used(kv);
    }
    return max_used;
}

static void test_gemma3_bounded(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "golden/models/gemma3-F32.gguf");
    assert_true(m->hp.n_swa > 0 && m->hp.n_swa < 32);
    int64_t n = 0;
    int32_t *ids = load_ids(&n);
    model_ctx *ctx = mt_ctx(m, 1024, 1, 2, 7);
    kv_cache *kv = model_ctx_kv(ctx);
    assert_true(kv->n_layer_swa > 0);
    strata_err err;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    int32_t used = feed(ctx, 0, ids, 0, n, 7, NULL, 0);
    /* window 8 + slack 32 + chunk 7 -> at most 4 blocks, of 32 held */
    print_message("window blocks in use at most %d over %lld positions (main %d)\n", used,
                  (long long)n, kv->n_blocks - kv->n_free);
    assert_true(used <= (int32_t)((m->hp.n_swa + 32 + 7 + 31) / 32 + 2));
    assert_int_equal(kv->n_blocks - kv->n_free, (n + 31) / 32);
    assert_true(kv_cache_bytes(kv) < (size_t)kv->n_layer * kv->n_blocks *
                                         (kv->k_block_bytes + kv->v_block_bytes));
    model_ctx_free(ctx);
    model_close(m);
    free(ids);
}

/* Speculative rollback: feed 300, feed 10 more, cut back to 302, feed on
 * to 400: the same logits as one straight run (chunked the same way after
 * the cut, so bit for bit: batch invariance). Then going back to 100 is
 * refused: the window of 100 is gone. */
static void test_gemma3_rollback(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "golden/models/gemma3-F32.gguf");
    const int64_t nv = m->hp.n_vocab;
    int64_t n = 0;
    int32_t *ids = load_ids(&n);
    int32_t *alt = malloc((size_t)n * sizeof(int32_t));
    memcpy(alt, ids, (size_t)n * sizeof(int32_t));
    for (int64_t i = 302; i < 312; i++) alt[i] = (alt[i] + 1) % (int32_t)nv; /* a bad draft */
    float *want = malloc((size_t)(400 * nv) * sizeof(float));
    float *got = malloc((size_t)(400 * nv) * sizeof(float));
    model_ctx *ctx = mt_ctx(m, 1024, 1, 2, 16);
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;

    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    feed(ctx, 0, ids, 0, 302, 16, want, nv);
    feed(ctx, 0, ids, 302, 400, 1, want, nv);
    kv_seq_remove(kv, 0);

    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    feed(ctx, 0, ids, 0, 302, 16, got, nv);
    feed(ctx, 0, alt, 302, 312, 10, NULL, nv); /* the draft, verified at once */
    assert_true(kv_seq_can_truncate(kv, 0, 302));
    kv_seq_truncate(kv, 0, 302);
    assert_int_equal(kv_seq_len(kv, 0), 302);
    feed(ctx, 0, ids, 302, 400, 1, got, nv);
    assert_memory_equal(got, want, (size_t)(400 * nv) * sizeof(float));

    /* back past the held window: refused, the sequence untouched */
    int32_t s0 = 0, p100 = 100;
    model_batch b = {.n_tokens = 1, .tokens = ids + 100, .seq_ids = &s0, .pos = &p100};
    assert_int_equal(model_forward(ctx, &b, got, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "sliding-window"));
    assert_int_equal(kv_seq_len(kv, 0), 400);
    model_ctx_free(ctx);
    model_close(m);
    free(ids);
    free(alt);
    free(want);
    free(got);
}

/* Feeds like feed() and publishes after each chunk, as the engine does. */
static void feed_pub(model_ctx *ctx, int32_t seq, const int32_t *ids, int64_t p0, int64_t p1,
                     float *logits, int64_t n_vocab)
{
    for (int64_t off = p0; off < p1; off += 16) {
        int64_t e = p1 - off < 16 ? p1 : off + 16;
        feed(ctx, seq, ids, off, e, 16, logits, n_vocab);
        kv_prefix_publish(model_ctx_kv(ctx), seq, ids);
    }
}

static void reuse(kv_cache *kv, int32_t seq, const int32_t *ids, int64_t n, int64_t expect)
{
    strata_err err;
    assert_int_equal(kv_seq_add(kv, seq, &err), 0);
    int64_t got = -1;
    assert_int_equal(kv_seq_reuse_prefix(kv, seq, ids, n, 0, &got, &err), 0);
    if (got != expect) fail_msg("reused %lld tokens, expected %lld", (long long)got, (long long)expect);
    assert_int_equal(kv_seq_len(kv, seq), got);
}

static void same_rows(const float *a, const float *b, int64_t p0, int64_t p1, int64_t nv)
{
    assert_memory_equal(a + p0 * nv, b + p0 * nv, (size_t)((p1 - p0) * nv) * sizeof(float));
}

/* The prefix cache with window layers keeps the window of a chain's end:
 * the same prompt again (a running sequence's, then an ended one's, then
 * one that ends exactly on a block, copied on write) goes on from it with
 * the cold run's logits bit for bit; a prompt sharing only an early part
 * (whose window is gone) reuses nothing; new sequences needing window
 * blocks push the kept windows out instead of failing. */
static void test_gemma3_prefix(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "golden/models/gemma3-F32.gguf");
    const int64_t nv = m->hp.n_vocab;
    int64_t n = 0;
    int32_t *ids = load_ids(&n);
    float *cold = malloc((size_t)(300 * nv) * sizeof(float));
    float *got = malloc((size_t)(300 * nv) * sizeof(float));
    strata_err err;
    /* the cold reference, without the cache */
    model_ctx *ref = mt_ctx(m, 1024, 1, 2, 16);
    assert_int_equal(kv_seq_add(model_ctx_kv(ref), 0, &err), 0);
    feed(ref, 0, ids, 0, 300, 16, cold, nv);
    model_ctx_free(ref);

    model_ctx *ctx = mt_ctx(m, 1024, 2, 2, 16);
    kv_cache *kv = model_ctx_kv(ctx);
    assert_int_equal(kv_prefix_enable(kv, -1, &err), 0);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    feed_pub(ctx, 0, ids, 0, 200, got, nv);
    same_rows(got, cold, 0, 200, nv);
    kv_prefix_stats st;
    kv_prefix_get_stats(kv, &st);
    assert_int_equal(st.blocks_cached, 6);
    /* the chain's end (192) has its window; 96 lost its own */
    assert_int_equal(kv_prefix_match(kv, ids, 200), 192);
    assert_int_equal(kv_prefix_match(kv, ids, 100), 0);

    /* while sequence 0 runs */
    reuse(kv, 1, ids, 200, 192);
    memset(got, 0, (size_t)(300 * nv) * sizeof(float));
    feed(ctx, 1, ids, 192, 200, 16, got, nv);
    same_rows(got, cold, 192, 200, nv);
    kv_seq_remove(kv, 1);

    /* a shared early part only */
    int32_t *alt = malloc((size_t)n * sizeof(int32_t));
    memcpy(alt, ids, (size_t)n * sizeof(int32_t));
    for (int64_t i = 100; i < n; i++) alt[i] = (alt[i] + 3) % (int32_t)nv;
    reuse(kv, 1, alt, 200, 0);
    kv_seq_remove(kv, 1);

    /* the next turn of an ended sequence */
    kv_seq_remove(kv, 0);
    reuse(kv, 0, ids, 300, 192);
    feed_pub(ctx, 0, ids, 192, 300, got, nv);
    same_rows(got, cold, 192, 300, nv);
    kv_seq_remove(kv, 0);

    /* a prompt that is exactly the chain (9 blocks): the last position
     * again, into copies of the last main and window blocks */
    reuse(kv, 0, ids, 288, 287);
    feed(ctx, 0, ids, 287, 288, 1, got, nv);
    same_rows(got, cold, 287, 288, nv);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_prefix_match(kv, ids, 288), 288);

    /* two new prompts at once need every window block: the kept windows
     * give way */
    const int32_t kept = kv_window_blocks_used(kv);
    assert_true(kept > 0);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    int32_t seqs[32], pos[32];
    for (int64_t off = 0; off < 200; off += 16) {
        for (int64_t i = 0; i < 16; i++) {
            seqs[i] = 0;
            seqs[16 + i] = 1;
            pos[i] = pos[16 + i] = (int32_t)(off + i);
        }
        int32_t toks[32];
        memcpy(toks, alt + off, 16 * sizeof(int32_t));
        memcpy(toks + 16, alt + 300 + off, 16 * sizeof(int32_t));
        int8_t none[32] = {0};
        model_batch b = {.n_tokens = 32, .tokens = toks, .seq_ids = seqs, .pos = pos,
                         .want_logits = none};
        if (model_forward(ctx, &b, NULL, &err) != 0) fail_msg("model_forward: %s", err.msg);
    }
    print_message("windows kept %d of %d; after two new prompts the old chain matches %lld\n",
                  kept, kv->w_n_blocks, (long long)kv_prefix_match(kv, ids, 288));
    assert_true(kept + 2 * 4 > kv->w_n_blocks); /* so some had to go */
    kv_seq_remove(kv, 0);
    kv_seq_remove(kv, 1);
    assert_int_equal(kv_window_blocks_used(kv) <= kv->w_n_blocks, 1);

    model_ctx_free(ctx);
    model_close(m);
    free(ids);
    free(alt);
    free(cold);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizing),
        cmocka_unit_test(test_bounded),
        cmocka_unit_test(test_truncate),
        cmocka_unit_test(test_gemma3_bounded),
        cmocka_unit_test(test_gemma3_rollback),
        cmocka_unit_test(test_gemma3_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
