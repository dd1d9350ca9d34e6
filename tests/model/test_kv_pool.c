/* The KV pool's memory (kv_cache.h "Memory"): pages are committed as blocks
 * are written, a step whose blocks have all been free for the hold time is
 * given back to the operating system (mincore on the pool's mapping says
 * which pages are resident), resident steps never are, the free list hands
 * out the lowest ids first, and rows given back read as zeros. Time is
 * passed to kv_pool_trim explicitly, so no test sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/clock.h"
#include "model/kv_cache.h"
#include "model/kv_prefix.h"

/* 2 layers, 4 KV heads of 64 f16: a block is 16 KiB of keys per layer (4
 * pages), so the steps of 8 blocks are whole pages. */
static kv_cache *make(int64_t n_blocks)
{
    kv_cache_params p = {.n_layer = 2, .n_head_kv = 4, .head_dim = 64, .head_dim_v = 64,
                         .n_ctx = n_blocks * KV_BLOCK_TOKENS, .n_seq_max = 4};
    kv_cache *kv = NULL;
    strata_err err;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(kv->k_block_bytes, 16384);
    return kv;
}

static size_t resident_pages(const void *p, size_t n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n_pages = (n + page - 1) / page, count = 0;
    unsigned char *vec = malloc(n_pages);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)p, n, vec), 0);
    for (size_t i = 0; i < n_pages; i++) count += vec[i] & 1;
    free(vec);
    return count;
}

static size_t pool_pages(const kv_cache *kv)
{
    return resident_pages(kv->k, kv->k_map_bytes) + resident_pages(kv->v, kv->v_map_bytes);
}

/* Grows seq to n_blocks blocks and writes every row of them. */
static void fill(kv_cache *kv, int32_t seq, int32_t n_blocks)
{
    strata_err err;
    if (!kv_seq_active(kv, seq) && kv_seq_add(kv, seq, &err) != 0) fail_msg("%s", err.msg);
    if (kv_seq_extend(kv, seq, (int64_t)n_blocks * KV_BLOCK_TOKENS, &err) != 0) {
        fail_msg("%s", err.msg);
    }
    const kv_seq *s = &kv->seqs[seq];
    for (int32_t i = 0; i < s->n_blocks; i++) {
        for (int64_t l = 0; l < kv->n_layer; l++) {
            memset(kv_k_block(kv, l, s->blocks[i], 0), 0x11, kv->k_block_bytes);
            memset(kv_v_block(kv, l, s->blocks[i], 0), 0x22, kv->v_block_bytes);
        }
    }
}

/* One long request: the pool's resident pages grow with it and fall back
 * to none once its blocks are free and trimmed. */
static void test_rss_follows_use(void **state)
{
    (void)state;
    kv_cache *kv = make(64);
    strata_err err;
    assert_int_equal(kv_pool_set_elastic(kv, 8, 0, 0.0, &err), 0);
    assert_int_equal(pool_pages(kv), 0); /* reserved, not committed */
    fill(kv, 0, 40);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t want = 40 * 2 * (kv->k_block_bytes + kv->v_block_bytes) / page;
    assert_true(pool_pages(kv) >= want);
    assert_int_equal(kv_pool_committed_steps(kv), 5);
    /* still held: nothing goes */
    assert_int_equal(kv_pool_trim(kv, strata_clock_ms() + 1e6), 0);
    assert_true(pool_pages(kv) >= want);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_pool_trim(kv, strata_clock_ms()), 5);
    assert_int_equal(pool_pages(kv), 0);
    assert_int_equal(kv_pool_committed_steps(kv), 0);
    assert_int_equal(kv->n_trimmed, 5);
    /* a given-back block reads as zeros, and is usable again */
    fill(kv, 1, 1);
    assert_int_equal(kv->seqs[1].blocks[0], 0);
    assert_int_equal(kv_k_block(kv, 0, 1, 0)[0], 0); /* block 1: given back, untouched */
    assert_int_equal(kv_k_block(kv, 0, 0, 0)[0], 0x11);
    kv_cache_free(kv);
}

/* The hold time: free steps stay committed until it has passed. */
static void test_hold(void **state)
{
    (void)state;
    kv_cache *kv = make(64);
    strata_err err;
    assert_int_equal(kv_pool_set_elastic(kv, 8, 0, 1000.0, &err), 0);
    assert_true(kv_pool_next_trim_ms(kv, strata_clock_ms()) < 0);
    fill(kv, 0, 24);
    size_t used = pool_pages(kv);
    kv_seq_remove(kv, 0);
    double now = strata_clock_ms();
    assert_int_equal(kv_pool_trim(kv, now), 0);
    assert_int_equal(pool_pages(kv), used);
    double left = kv_pool_next_trim_ms(kv, now);
    assert_true(left > 0 && left <= 1000.0);
    assert_int_equal(kv_pool_trim(kv, now + 1001.0), 3);
    assert_int_equal(pool_pages(kv), 0);
    assert_true(kv_pool_next_trim_ms(kv, now + 1001.0) < 0);
    kv_cache_free(kv);
}

/* Resident steps (the initial size) are never given back; prefaulting
 * commits everything and turns trimming off. */
static void test_resident(void **state)
{
    (void)state;
    kv_cache *kv = make(64);
    strata_err err;
    assert_int_equal(kv_pool_set_elastic(kv, 8, 16, 0.0, &err), 0);
    fill(kv, 0, 40);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_pool_trim(kv, strata_clock_ms()), 3);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(pool_pages(kv), 16 * 2 * (kv->k_block_bytes + kv->v_block_bytes) / page);
    kv_cache_free(kv);

    kv = make(16);
    assert_int_equal(kv_pool_set_elastic(kv, 8, 0, 0.0, &err), 0);
    kv_pool_prefault(kv);
    assert_int_equal(pool_pages(kv), (kv->k_map_bytes + kv->v_map_bytes) / page);
    fill(kv, 0, 16);
    kv_seq_remove(kv, 0);
    assert_int_equal(kv_pool_trim(kv, strata_clock_ms() + 1e6), 0);
    assert_int_equal(pool_pages(kv), (kv->k_map_bytes + kv->v_map_bytes) / page);
    kv_cache_free(kv);
}

/* The lowest free ids go first, so high steps empty out. */
static void test_low_ids_first(void **state)
{
    (void)state;
    kv_cache *kv = make(64);
    strata_err err;
    assert_int_equal(kv_pool_set_elastic(kv, 8, 0, 0.0, &err), 0);
    fill(kv, 0, 10);
    fill(kv, 1, 10);
    assert_int_equal(kv->seqs[1].blocks[0], 10);
    kv_seq_remove(kv, 0);
    fill(kv, 2, 5);
    for (int32_t i = 0; i < 5; i++) assert_int_equal(kv->seqs[2].blocks[i], i);
    kv_seq_remove(kv, 1);
    /* blocks 5..63 are free: steps 1 and 2 (8..23) were used and go back;
     * step 0 holds sequence 2 */
    assert_int_equal(kv_pool_trim(kv, strata_clock_ms()), 2);
    assert_int_equal(kv_pool_committed_steps(kv), 1);
    fill(kv, 2, 9);
    assert_int_equal(kv->seqs[2].blocks[8], 8);
    kv_cache_free(kv);
}

/* Blocks only the prefix cache keeps hold their step for the hold time
 * (as kv_pool_trim sees it), then are evicted and the step given back; the
 * resident step keeps its cached blocks. */
static void test_cached_blocks(void **state)
{
    (void)state;
    kv_cache *kv = make(64);
    strata_err err;
    assert_int_equal(kv_prefix_enable(kv, -1, &err), 0);
    assert_int_equal(kv_pool_set_elastic(kv, 8, 8, 100.0, &err), 0);
    int32_t toks[24 * KV_BLOCK_TOKENS];
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++) toks[i] = (int32_t)(i % 97);
    fill(kv, 0, 24);
    kv_prefix_publish(kv, 0, toks);
    kv_seq_remove(kv, 0);
    kv_prefix_stats ps;
    kv_prefix_get_stats(kv, &ps);
    assert_int_equal(ps.blocks_idle, 24);
    double now = strata_clock_ms();
    assert_true(kv_pool_next_trim_ms(kv, now) == 0); /* not yet seen: look now */
    assert_int_equal(kv_pool_trim(kv, now), 0);      /* the clock starts */
    assert_true(kv_pool_next_trim_ms(kv, now) > 0);
    assert_int_equal(kv_pool_trim(kv, now + 50.0), 0);
    assert_int_equal(kv_pool_trim(kv, now + 100.0), 2);
    kv_prefix_get_stats(kv, &ps);
    assert_int_equal(ps.blocks_idle, 8); /* the resident step's */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(pool_pages(kv), 8 * 2 * (kv->k_block_bytes + kv->v_block_bytes) / page);
    /* a lookup still finds the first 8 blocks */
    assert_int_equal(kv_prefix_match(kv, toks, 24 * KV_BLOCK_TOKENS), 8 * KV_BLOCK_TOKENS);
    kv_cache_free(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rss_follows_use),
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_resident),
        cmocka_unit_test(test_low_ids_first),
        cmocka_unit_test(test_cached_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
