/* The prefix cache of the KV pool (model/kv_prefix.h): publishing full
 * blocks, reusing the longest matching chain by reference, the tokens and
 * the chain (not the hash) deciding a match, copy on write when a whole
 * prompt is cached, idle blocks counting as free and going least recently
 * used first, the idle budget, and min_tokens. Also the chain hash's
 * fixed values (the server will compute the same). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/chainhash.h"
#include "model/kv_cache.h"
#include "model/kv_prefix.h"
#include "model_testutil.h"

#define BT KV_BLOCK_TOKENS

static kv_cache *make(int64_t n_ctx, int n_seq, int32_t max_idle)
{
    kv_cache_params p = {.n_layer = 2, .n_head_kv = 2, .head_dim = 16, .head_dim_v = 8,
                         .n_ctx = n_ctx, .n_seq_max = n_seq};
    kv_cache *kv = NULL;
    strata_err err;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    if (kv_prefix_enable(kv, max_idle, &err) != 0) fail_msg("%s", err.msg);
    return kv;
}

/* Writes a pattern derived from (token, pos) into every row of positions
 * [from, to) of seq: what a forward pass would leave there. */
static void fill_rows(kv_cache *kv, int32_t seq, const int32_t *toks, int64_t from, int64_t to)
{
    for (int64_t p = from; p < to; p++) {
        for (int64_t l = 0; l < kv->n_layer; l++) {
            for (int64_t h = 0; h < kv->n_head_kv; h++) {
                uint8_t *k = kv_k_row(kv, seq, l, p, h), *v = kv_v_row(kv, seq, l, p, h);
                for (size_t i = 0; i < kv->k_row_bytes; i++) k[i] = (uint8_t)(toks[p] * 7 + p + l + h + i);
                for (size_t i = 0; i < kv->v_row_bytes; i++) v[i] = (uint8_t)(toks[p] * 3 + p + l + h + i);
            }
        }
    }
}

static bool rows_match(const kv_cache *kv, int32_t seq, const int32_t *toks, int64_t from,
                       int64_t to)
{
    for (int64_t p = from; p < to; p++) {
        for (int64_t l = 0; l < kv->n_layer; l++) {
            for (int64_t h = 0; h < kv->n_head_kv; h++) {
                const uint8_t *k = kv_k_row(kv, seq, l, p, h), *v = kv_v_row(kv, seq, l, p, h);
                for (size_t i = 0; i < kv->k_row_bytes; i++) {
                    if (k[i] != (uint8_t)(toks[p] * 7 + p + l + h + i)) return false;
                }
                for (size_t i = 0; i < kv->v_row_bytes; i++) {
                    if (v[i] != (uint8_t)(toks[p] * 3 + p + l + h + i)) return false;
                }
            }
        }
    }
    return true;
}

/* A sequence that computed toks[0, n) and published them. */
static void compute_and_publish(kv_cache *kv, int32_t seq, const int32_t *toks, int64_t n)
{
    strata_err err;
    assert_int_equal(kv_seq_add(kv, seq, &err), 0);
    assert_int_equal(kv_seq_extend(kv, seq, n, &err), 0);
    fill_rows(kv, seq, toks, 0, n);
    kv_prefix_publish(kv, seq, toks);
}

static void iota(int32_t *t, int64_t n, int32_t base)
{
    for (int64_t i = 0; i < n; i++) t[i] = base + (int32_t)i;
}

static void test_chainhash_values(void **state)
{
    (void)state;
    int32_t t[BT];
    iota(t, BT, 1);
    uint64_t h1 = chainhash_block(CHAINHASH_ROOT, t, BT);
    /* chained: the same block after another prefix hashes differently */
    assert_true(chainhash_block(h1, t, BT) != h1);
    /* one token changed changes the hash */
    t[BT - 1]++;
    assert_true(chainhash_block(CHAINHASH_ROOT, t, BT) != h1);
    t[BT - 1]--;
    /* the definition is fixed (the server computes the same): pinned to the
     * value an independent implementation of chainhash.h's text gives */
    assert_true(chainhash_block(CHAINHASH_ROOT, t, BT) == h1);
    char buf[32];
    snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)h1);
    assert_string_equal(buf, "e1374632c578bc1e");
}

/* Reuse by reference: the same block ids, the rows as written, up to the
 * first block that differs; a mid-block end reuses only full blocks. */
static void test_reuse_longest_chain(void **state)
{
    (void)state;
    kv_cache *kv = make(4 * 128, 4, -1);
    strata_err err;
    int32_t toks[128];
    iota(toks, 128, 100);
    compute_and_publish(kv, 0, toks, 70); /* blocks 0, 1 full; 2 partial */
    kv_prefix_stats st;
    kv_prefix_get_stats(kv, &st);
    assert_int_equal(st.blocks_cached, 2);
    assert_int_equal(st.blocks_idle, 0);
    int32_t b0 = kv->seqs[0].blocks[0], b1 = kv->seqs[0].blocks[1];
    assert_int_equal(kv->refcount[b0], 2); /* the sequence and the index */

    /* while seq 0 still runs: shared */
    int64_t reused = -1;
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, toks, 100, 0, &reused, &err), 0);
    assert_int_equal(reused, 64);
    assert_int_equal(kv_seq_len(kv, 1), 64);
    assert_int_equal(kv->seqs[1].blocks[0], b0);
    assert_int_equal(kv->seqs[1].blocks[1], b1);
    assert_int_equal(kv->refcount[b0], 3);
    assert_true(rows_match(kv, 1, toks, 0, 64));

    /* a prompt ending mid-block 1 reuses block 0 only */
    assert_int_equal(kv_seq_add(kv, 2, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 2, toks, 50, 0, &reused, &err), 0);
    assert_int_equal(reused, 32);
    /* a prompt that differs in block 1 reuses block 0 only */
    int32_t other[128];
    memcpy(other, toks, sizeof(other));
    other[40] = 7;
    assert_int_equal(kv_seq_add(kv, 3, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 3, other, 100, 0, &reused, &err), 0);
    assert_int_equal(reused, 32);
    kv_seq_remove(kv, 3);
    /* one differing in block 0 reuses nothing */
    other[3] = 7;
    assert_int_equal(kv_seq_add(kv, 3, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 3, other, 100, 0, &reused, &err), 0);
    assert_int_equal(reused, 0);
    assert_int_equal(kv_seq_len(kv, 3), 0);
    /* a sequence that is not empty is refused */
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, toks, 100, 0, &reused, &err), STRATA_EINVAL);

    kv_prefix_get_stats(kv, &st);
    assert_int_equal(st.lookup_tokens, 100 + 50 + 100 + 100);
    assert_int_equal(st.hit_tokens, 64 + 32 + 32);

    /* every sequence gone: the published blocks stay, idle, and count as free */
    for (int s = 0; s < 4; s++) kv_seq_remove(kv, s);
    kv_prefix_get_stats(kv, &st);
    assert_int_equal(st.blocks_cached, 2);
    assert_int_equal(st.blocks_idle, 2);
    assert_int_equal(kv_free_blocks(kv), kv->n_blocks);
    assert_int_equal(kv_prefix_match(kv, toks, 128), 64);
    kv_cache_free(kv);
}

/* A block's entry names its parent entry: the same tokens after another
 * first block are not a match. */
static void test_chain_not_block(void **state)
{
    (void)state;
    kv_cache *kv = make(256, 2, -1);
    int32_t a[64], b[64];
    iota(a, 64, 1);
    iota(b, 64, 1);
    b[5] = 999; /* block 0 differs, block 1 is the same tokens */
    compute_and_publish(kv, 0, a, 64);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_prefix_match(kv, a, 64), 64);
    assert_int_equal(kv_prefix_match(kv, b, 64), 0);
    assert_int_equal(kv_prefix_match(kv, b + 32, 32), 0);
    kv_cache_free(kv);
}

/* The whole prompt cached: the last block is copied (the last position is
 * written again), the cached one is left as it was. */
static void test_whole_prompt_copy_on_write(void **state)
{
    (void)state;
    kv_cache *kv = make(256, 2, -1);
    strata_err err;
    int32_t toks[64];
    iota(toks, 64, 50);
    compute_and_publish(kv, 0, toks, 64);
    int32_t b0 = kv->seqs[0].blocks[0], b1 = kv->seqs[0].blocks[1];
    kv_seq_remove(kv, 0);

    int64_t reused = 0;
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, toks, 64, 0, &reused, &err), 0);
    assert_int_equal(reused, 63);
    assert_int_equal(kv_seq_len(kv, 1), 63);
    assert_int_equal(kv->seqs[1].blocks[0], b0);
    int32_t copy = kv->seqs[1].blocks[1];
    assert_true(copy != b1);
    assert_int_equal(kv->refcount[copy], 1);
    assert_true(rows_match(kv, 1, toks, 0, 63));
    /* the sequence writes position 63 differently: the cache is untouched */
    assert_int_equal(kv_seq_extend(kv, 1, 64, &err), 0);
    int32_t wrong[64];
    memcpy(wrong, toks, sizeof(wrong));
    wrong[63] = 1;
    fill_rows(kv, 1, wrong, 63, 64);
    kv_prefix_publish(kv, 1, wrong);
    kv_seq_remove(kv, 1);
    assert_int_equal(kv_prefix_match(kv, toks, 64), 64);
    assert_int_equal(kv_prefix_match(kv, wrong, 64), 64); /* published too, its own chain */
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, toks, 80, 0, &reused, &err), 0);
    assert_int_equal(reused, 64);
    assert_int_equal(kv->seqs[0].blocks[1], b1);
    assert_true(rows_match(kv, 0, toks, 0, 64));
    kv_seq_remove(kv, 0);

    /* min_tokens: a reuse shorter than it reuses nothing and holds nothing */
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, toks, 80, 65, &reused, &err), 0);
    assert_int_equal(reused, 0);
    assert_int_equal(kv->seqs[0].n_blocks, 0);
    assert_int_equal(kv_free_blocks(kv), kv->n_blocks);
    kv_cache_free(kv);
}

/* Copy on write with no block free: taken out of the index when only the
 * index shares it; one block fewer reused when another sequence holds it. */
static void test_copy_on_write_full_pool(void **state)
{
    (void)state;
    kv_cache *kv = make(4 * BT, 3, -1);
    strata_err err;
    int32_t toks[64], fill[64];
    iota(toks, 64, 10);
    iota(fill, 64, 500);
    compute_and_publish(kv, 0, toks, 64);
    kv_seq_remove(kv, 0);
    /* the other two blocks held by a sequence that is not published */
    assert_int_equal(kv_seq_add(kv, 2, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 2, 64, &err), 0);
    assert_int_equal(kv->n_free, 0);

    int64_t reused = 0;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, toks, 64, 0, &reused, &err), 0);
    assert_int_equal(reused, 63);
    int32_t last = kv->seqs[0].blocks[1];
    assert_int_equal(kv->refcount[last], 1); /* private: out of the index */
    assert_int_equal(kv_prefix_match(kv, toks, 64), 32);

    /* seq 1 shares block 0 while seq 0 holds it: copy on write impossible
     * (no block free) and block 1 is not cached any more: 32 reused */
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, toks, 32, 0, &reused, &err), 0);
    assert_int_equal(reused, 0); /* the whole prompt = block 0, no copy: none */
    assert_int_equal(kv->seqs[1].n_blocks, 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, toks, 40, 0, &reused, &err), 0);
    assert_int_equal(reused, 32);
    kv_cache_free(kv);
}

/* Idle blocks are taken only when the free list is empty, oldest first. */
static void test_lru_eviction(void **state)
{
    (void)state;
    kv_cache *kv = make(4 * BT, 2, -1);
    strata_err err;
    int32_t a[BT], b[BT], c[3 * BT];
    iota(a, BT, 1);
    iota(b, BT, 1000);
    iota(c, 3 * BT, 2000);
    compute_and_publish(kv, 0, a, BT);
    kv_seq_remove(kv, 0);
    compute_and_publish(kv, 0, b, BT);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv->n_free, 2);
    assert_int_equal(kv_free_blocks(kv), 4);
    /* two free blocks: nothing evicted */
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 1, 2 * BT, &err), 0);
    assert_int_equal(kv_prefix_match(kv, a, BT), BT);
    assert_int_equal(kv_prefix_match(kv, b, BT), BT);
    /* a third: the least recently idle (a) goes */
    assert_int_equal(kv_seq_extend(kv, 1, 3 * BT, &err), 0);
    assert_int_equal(kv_prefix_match(kv, a, BT), 0);
    assert_int_equal(kv_prefix_match(kv, b, BT), BT);
    /* a reuse makes b recent: held, then idle again, newest */
    kv_seq_remove(kv, 1);
    compute_and_publish(kv, 1, c, 2 * BT); /* c0, c1 published */
    kv_seq_remove(kv, 1);                  /* idle order now: b, c1, c0 */
    int64_t reused = 0;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, b, BT + 1, 0, &reused, &err), 0);
    assert_int_equal(reused, BT);
    kv_seq_remove(kv, 0);                  /* idle order: c1, c0, b */
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 1, 2 * BT, &err), 0); /* 1 free + c1 */
    assert_int_equal(kv_prefix_match(kv, c, 2 * BT), BT);
    assert_int_equal(kv_prefix_match(kv, b, BT), BT);
    kv_prefix_stats st;
    kv_prefix_get_stats(kv, &st);
    assert_int_equal(st.evictions, 2);
    /* the pool is never over-committed: all 4 blocks may be taken */
    assert_int_equal(kv_seq_extend(kv, 1, 4 * BT, &err), 0);
    assert_int_equal(kv_free_blocks(kv), 0);
    assert_int_equal(kv_seq_extend(kv, 1, 4 * BT + 1, &err), STRATA_ERANGE);
    kv_cache_free(kv);
}

/* The budget caps idle blocks; 0 shares only while a sequence holds them. */
static void test_idle_budget(void **state)
{
    (void)state;
    kv_cache *kv = make(8 * BT, 2, 1);
    int32_t a[BT + 5], b[BT];
    iota(a, BT + 5, 1);
    iota(b, BT, 1000);
    compute_and_publish(kv, 0, a, BT);
    kv_seq_remove(kv, 0);
    compute_and_publish(kv, 0, b, BT);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_prefix_match(kv, a, BT), 0);
    assert_int_equal(kv_prefix_match(kv, b, BT), BT);
    assert_int_equal(kv->n_free, 7);
    kv_cache_free(kv);

    kv = make(8 * BT, 2, 0);
    strata_err err;
    compute_and_publish(kv, 0, a, BT + 5);
    int64_t reused = 0;
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, a, BT + 1, 0, &reused, &err), 0);
    assert_int_equal(reused, BT);
    kv_seq_remove(kv, 0);
    kv_seq_remove(kv, 1);
    assert_int_equal(kv_prefix_match(kv, a, BT), 0);
    assert_int_equal(kv->n_free, 8);
    kv_cache_free(kv);
}

/* Off (never enabled): nothing is reused or kept, as before. */
static void test_off(void **state)
{
    (void)state;
    kv_cache_params p = {.n_layer = 1, .n_head_kv = 1, .head_dim = 8, .head_dim_v = 8,
                         .n_ctx = 64, .n_seq_max = 1};
    kv_cache *kv = NULL;
    strata_err err;
    assert_int_equal(kv_cache_init(&kv, &p, &err), 0);
    int32_t a[64];
    iota(a, 64, 1);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 0, 64, &err), 0);
    kv_prefix_publish(kv, 0, a);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_prefix_match(kv, a, 64), 0);
    int64_t reused = 5;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, a, 64, 0, &reused, &err), 0);
    assert_int_equal(reused, 0);
    kv_cache_free(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chainhash_values),
        cmocka_unit_test(test_reuse_longest_chain),
        cmocka_unit_test(test_chain_not_block),
        cmocka_unit_test(test_whole_prompt_copy_on_write),
        cmocka_unit_test(test_copy_on_write_full_pool),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_idle_budget),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
