/* The paged KV cache: pool sizing, block tables, growth by block, release
 * on truncate and remove, all-or-nothing reservation, and the forward
 * pass's batch checks, which must leave the cache untouched on error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/kv_cache.h"
#include "model/kv_prefix.h"
#include "model_testutil.h"

static kv_cache *make(int64_t n_ctx, int n_seq)
{
    kv_cache_params p = {.n_layer = 3, .n_head_kv = 2, .head_dim = 16, .head_dim_v = 8,
                         .n_ctx = n_ctx, .n_seq_max = n_seq};
    kv_cache *kv = NULL;
    strata_err err;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    return kv;
}

static void test_sizing(void **state)
{
    (void)state;
    kv_cache *kv = make(100, 2);
    /* 100 positions round up to 4 blocks of 32 */
    assert_int_equal(kv->block_tokens, KV_BLOCK_TOKENS);
    assert_int_equal(kv->n_blocks, 4);
    assert_int_equal(kv_free_blocks(kv), 4);
    assert_int_equal(kv->k_row_bytes, 16 * 2);
    assert_int_equal(kv->v_row_bytes, 8 * 2);
    kv_cache_params p = {.n_layer = 3, .n_head_kv = 2, .head_dim = 16, .head_dim_v = 8,
                         .n_ctx = 100, .n_seq_max = 2};
    assert_int_equal(kv_cache_pool_bytes(&p), (size_t)3 * 4 * 2 * 32 * (16 + 8) * 2);
    kv_cache_free(kv);

    /* bad sizes are refused, never allocated */
    strata_err err;
    kv_cache *bad = NULL;
    p.n_ctx = 0;
    assert_int_equal(kv_cache_init(&bad, &p, &err), STRATA_EINVAL);
    assert_null(bad);
    p.n_ctx = 100;
    p.n_seq_max = 0;
    assert_int_equal(kv_cache_init(&bad, &p, &err), STRATA_EINVAL);
    p.n_seq_max = 1;
    p.n_layer = 1 << 20;
    p.n_head_kv = 1 << 20;
    p.n_ctx = 1LL << 30;
    assert_int_equal(kv_cache_init(&bad, &p, &err), STRATA_EINVAL);
    assert_int_equal(kv_cache_pool_bytes(&p), 0);
}

/* K and V row types: Q8_0 rows are GGUF blocks (34 bytes per 32 elements),
 * chosen separately for keys and values; a head size that Q8_0 cannot
 * hold and an unknown type are refused with a message that says so. */
static void test_row_types(void **state)
{
    (void)state;
    strata_err err;
    kv_cache_params p = {.n_layer = 2, .n_head_kv = 2, .head_dim = 64, .head_dim_v = 32,
                         .n_ctx = 64, .n_seq_max = 1, .k_type = STRATA_TYPE_Q8_0};
    kv_cache *kv = NULL;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(kv->k_type, STRATA_TYPE_Q8_0);
    assert_int_equal(kv->v_type, STRATA_TYPE_F16);
    assert_int_equal(kv->k_row_bytes, 2 * 34);
    assert_int_equal(kv->v_row_bytes, 32 * 2);
    assert_int_equal(kv->k_block_bytes, (size_t)2 * 32 * 68);
    assert_int_equal(kv_cache_pool_bytes(&p), (size_t)2 * 2 * 2 * 32 * (68 + 64));
    /* a row of a later block starts where the type's stride puts it */
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 0, 40, &err), 0);
    assert_ptr_equal(kv_k_row(kv, 0, 1, 35, 1), kv_k_block(kv, 1, kv->seqs[0].blocks[1], 1) + 3 * 68);
    assert_ptr_equal(kv_v_row(kv, 0, 1, 35, 1), kv_v_block(kv, 1, kv->seqs[0].blocks[1], 1) + 3 * 64);
    kv_cache_free(kv);

    p.v_type = STRATA_TYPE_Q8_0;
    if (kv_cache_init(&kv, &p, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(kv->v_row_bytes, 34);
    kv_cache_free(kv);

    kv_cache *bad = NULL;
    p.head_dim_v = 48; /* not a multiple of 32 */
    assert_int_equal(kv_cache_init(&bad, &p, &err), STRATA_EINVAL);
    assert_null(bad);
    assert_non_null(strstr(err.msg, "multiple of 32"));
    assert_non_null(strstr(err.msg, "value"));
    assert_int_equal(kv_cache_pool_bytes(&p), 0);
    p.head_dim_v = 32;
    p.k_type = STRATA_TYPE_Q4_0;
    assert_int_equal(kv_cache_init(&bad, &p, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "key"));

    uint32_t t = 0;
    assert_int_equal(kv_type_parse("Q8_0", &t, &err), 0);
    assert_int_equal(t, STRATA_TYPE_Q8_0);
    assert_int_equal(kv_type_parse("f16", &t, &err), 0);
    assert_int_equal(t, STRATA_TYPE_F16);
    assert_int_equal(kv_type_parse("q4_0", &t, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "q8_0"));
}

static void test_sequences_and_blocks(void **state)
{
    (void)state;
    strata_err err;
    kv_cache *kv = make(32 * 6, 3);
    assert_int_equal(kv_seq_add(kv, 3, &err), STRATA_EINVAL);
    assert_int_equal(kv_seq_add(kv, -1, &err), STRATA_EINVAL);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_add(kv, 0, &err), STRATA_EINVAL);
    assert_int_equal(kv_seq_add(kv, 2, &err), 0);
    assert_false(kv_seq_active(kv, 1));
    assert_int_equal(kv_seq_len(kv, 1), 0);
    assert_int_equal(kv_seq_extend(kv, 1, 5, &err), STRATA_EINVAL); /* inactive */

    /* growth is by whole blocks */
    assert_int_equal(kv_seq_blocks_needed(kv, 0, 1), 1);
    assert_int_equal(kv_seq_extend(kv, 0, 1, &err), 0);
    assert_int_equal(kv_free_blocks(kv), 5);
    assert_int_equal(kv_seq_extend(kv, 0, 32, &err), 0);
    assert_int_equal(kv_free_blocks(kv), 5);
    assert_int_equal(kv_seq_blocks_needed(kv, 0, 33), 1);
    assert_int_equal(kv_seq_extend(kv, 0, 70, &err), 0);
    assert_int_equal(kv_seq_len(kv, 0), 70);
    assert_int_equal(kv->seqs[0].n_blocks, 3);
    assert_int_equal(kv_free_blocks(kv), 3);
    assert_int_equal(kv_seq_extend(kv, 2, 40, &err), 0);
    assert_int_equal(kv_free_blocks(kv), 1);

    /* all or nothing: 3 blocks wanted, 1 free */
    assert_int_equal(kv_seq_extend(kv, 2, 130, &err), STRATA_ERANGE);
    assert_non_null(strstr(err.msg, "KV cache full"));
    assert_int_equal(kv_seq_len(kv, 2), 40);
    assert_int_equal(kv_free_blocks(kv), 1);
    /* past what the pool could ever hold */
    assert_int_equal(kv_seq_extend(kv, 2, 32 * 6 + 1, &err), STRATA_ERANGE);

    /* rows: each position has its own row; sequences share no block */
    for (int64_t p = 0; p < 70; p++) {
        uint8_t *k0 = kv_k_row(kv, 0, 1, p, 1);
        assert_ptr_equal(k0, kv_k_block(kv, 1, kv->seqs[0].blocks[p / 32], 1) +
                                 (size_t)(p % 32) * kv->k_row_bytes);
        for (int64_t q = 0; q < 40; q++) assert_ptr_not_equal(k0, kv_k_row(kv, 2, 1, q, 1));
        if (p > 0) assert_ptr_not_equal(kv_v_row(kv, 0, 2, p, 0), kv_v_row(kv, 0, 2, p - 1, 0));
    }
    for (int32_t i = 0; i < kv->seqs[0].n_blocks; i++) {
        for (int32_t j = 0; j < kv->seqs[2].n_blocks; j++) {
            assert_int_not_equal(kv->seqs[0].blocks[i], kv->seqs[2].blocks[j]);
        }
    }

    /* truncation keeps the blocks that still hold positions */
    kv_seq_truncate(kv, 0, 33);
    assert_int_equal(kv_seq_len(kv, 0), 33);
    assert_int_equal(kv->seqs[0].n_blocks, 2);
    assert_int_equal(kv_free_blocks(kv), 2);
    kv_seq_truncate(kv, 0, 64); /* longer than it is: nothing */
    assert_int_equal(kv_seq_len(kv, 0), 33);
    kv_seq_truncate(kv, 0, 0);
    assert_int_equal(kv->seqs[0].n_blocks, 0);
    assert_int_equal(kv_free_blocks(kv), 4);

    /* removing returns everything, and the slot can be used again */
    kv_seq_remove(kv, 2);
    kv_seq_remove(kv, 2); /* twice: ignored */
    kv_seq_remove(kv, 7); /* out of range: ignored */
    assert_int_equal(kv_free_blocks(kv), 6);
    assert_false(kv_seq_active(kv, 2));
    assert_int_equal(kv_seq_add(kv, 2, &err), 0);
    assert_int_equal(kv_seq_extend(kv, 2, 32 * 6, &err), 0); /* one sequence may take all */
    assert_int_equal(kv_free_blocks(kv), 0);
    kv_cache_free(kv);
}

/* The forward pass checks the whole batch before changing anything. */
static void test_forward_batch_checks(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/stories260K.gguf");
    model_ctx *ctx = mt_ctx(m, 64, 2, 1, 0);
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    int32_t tok[40], seq[40], pos[40];
    for (int i = 0; i < 40; i++) {
        tok[i] = 1 + i;
        seq[i] = 0;
        pos[i] = i;
    }
    float *logits = malloc((size_t)(40 * m->hp.n_vocab) * sizeof(float));
    model_batch b = {.n_tokens = 10, .tokens = tok, .seq_ids = seq, .pos = pos};
    assert_int_equal(model_forward(ctx, &b, logits, &err), 0);
    assert_int_equal(kv_seq_len(kv, 0), 10);
    int32_t free_before = kv_free_blocks(kv);

    /* a token id past the vocabulary */
    b = (model_batch){.n_tokens = 2, .tokens = tok + 10, .seq_ids = seq + 10, .pos = pos + 10};
    tok[11] = 512;
    assert_int_equal(model_forward(ctx, &b, logits, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "vocabulary"));
    tok[11] = 12;
    /* a sequence that was never started */
    seq[10] = 1;
    assert_int_equal(model_forward(ctx, &b, logits, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "not active"));
    seq[10] = 0;
    /* a gap after the cached positions */
    b.pos = pos + 11;
    assert_int_equal(model_forward(ctx, &b, logits, &err), STRATA_EINVAL);
    /* positions that are not consecutive within the batch */
    pos[11] = 12;
    b.pos = pos + 10;
    assert_int_equal(model_forward(ctx, &b, logits, &err), STRATA_EINVAL);
    pos[11] = 11;
    /* logits asked for without a buffer */
    assert_int_equal(model_forward(ctx, &b, NULL, &err), STRATA_EINVAL);
    /* more positions than the cache holds (64): refused whole */
    int32_t many_tok[70], many_seq[70] = {0}, many_pos[70];
    for (int i = 0; i < 70; i++) {
        many_tok[i] = 5;
        many_pos[i] = 10 + i;
    }
    b = (model_batch){.n_tokens = 60, .tokens = many_tok, .seq_ids = many_seq, .pos = many_pos};
    assert_int_equal(model_forward(ctx, &b, NULL, &err), STRATA_EINVAL); /* wants logits */
    int8_t none[70] = {0};
    b.want_logits = none;
    assert_int_equal(model_forward(ctx, &b, NULL, &err), STRATA_ERANGE);
    /* nothing changed by any of the refused batches */
    assert_int_equal(kv_seq_len(kv, 0), 10);
    assert_int_equal(kv_free_blocks(kv), free_before);

    /* and the sequence still continues exactly where it was */
    b = (model_batch){.n_tokens = 30, .tokens = tok + 10, .seq_ids = seq + 10, .pos = pos + 10};
    assert_int_equal(model_forward(ctx, &b, logits + 10 * m->hp.n_vocab, &err), 0);
    float *ref = malloc((size_t)(40 * m->hp.n_vocab) * sizeof(float));
    model_ctx *fresh = mt_ctx(m, 64, 1, 1, 0);
    mt_eval(fresh, 0, tok, 40, ref);
    assert_memory_equal(logits + 10 * m->hp.n_vocab, ref + 10 * m->hp.n_vocab,
                        (size_t)(30 * m->hp.n_vocab) * sizeof(float));
    /* an empty batch is a no-op */
    b.n_tokens = 0;
    assert_int_equal(model_forward(ctx, &b, NULL, &err), 0);
    free(ref);
    free(logits);
    model_ctx_free(fresh);
    model_ctx_free(ctx);
    model_close(m);
}

/* The write guard (kv_seq_check_writable): a batch that would write into a
 * block published in the prefix cache, or shared with another sequence,
 * is refused with STRATA_EINVAL before anything changes. The engine never
 * builds such a batch, so the situations are made by hand here. */
static void test_write_guard(void **state)
{
    (void)state;
    model *m = NULL;
    MT_OPEN(m, "models/stories260K.gguf");
    model_ctx *ctx = mt_ctx(m, 256, 2, 1, 0);
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;
    if (kv_prefix_enable(kv, -1, &err) != 0) fail_msg("%s", err.msg);
    int32_t tok[80], seq[80], pos[80];
    for (int i = 0; i < 80; i++) {
        tok[i] = 3 + (i * 37) % 400;
        seq[i] = 0;
        pos[i] = i;
    }
    const int64_t nv = m->hp.n_vocab;
    float *logits = malloc((size_t)(80 * nv) * sizeof(float));
    float *again = malloc((size_t)(80 * nv) * sizeof(float));
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    model_batch b = {.n_tokens = 74, .tokens = tok, .seq_ids = seq, .pos = pos};
    assert_int_equal(model_forward(ctx, &b, logits, &err), 0);
    kv_prefix_publish(kv, 0, tok); /* blocks 0 and 1 are listed now */
    int32_t free_before = kv_free_blocks(kv);

    /* rewinding into published block 1 (position 40) and writing: refused */
    b = (model_batch){.n_tokens = 10, .tokens = tok + 40, .seq_ids = seq, .pos = pos + 40};
    assert_int_equal(model_forward(ctx, &b, again, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "published"));
    assert_int_equal(kv_seq_len(kv, 0), 74);
    assert_int_equal(kv_free_blocks(kv), free_before);
    /* the same after an explicit truncation into the block */
    kv_seq_truncate(kv, 0, 40);
    assert_int_equal(model_forward(ctx, &b, again, &err), STRATA_EINVAL);
    assert_int_equal(kv_seq_len(kv, 0), 40);
    /* from the block's start the block is released, not written: allowed,
     * and the positions come out as the first time */
    b = (model_batch){.n_tokens = 42, .tokens = tok + 32, .seq_ids = seq, .pos = pos + 32};
    assert_int_equal(model_forward(ctx, &b, again, &err), 0);
    assert_memory_equal(again, logits + 32 * nv, (size_t)(42 * nv) * sizeof(float));
    /* the partly filled last block (position 74) is the sequence's own */
    b = (model_batch){.n_tokens = 1, .tokens = tok + 74, .seq_ids = seq, .pos = pos + 74};
    assert_int_equal(model_forward(ctx, &b, again, &err), 0);

    /* a block shared by two sequences without the index: made by hand */
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    kv_seq *s1 = &kv->seqs[1];
    int32_t b2 = kv->seqs[0].blocks[2]; /* positions 64..74, not listed */
    assert_int_equal(kv->refcount[b2], 1);
    assert_int_equal(kv_seq_check_writable(kv, 0, 70, &err), 0);
    s1->blocks[0] = b2;
    s1->n_blocks = 1;
    s1->n_pos = 5;
    kv->refcount[b2]++;
    assert_int_equal(kv_seq_check_writable(kv, 0, 70, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "shared"));
    int32_t s_tok = 9, s_seq = 1, s_pos = 5;
    b = (model_batch){.n_tokens = 1, .tokens = &s_tok, .seq_ids = &s_seq, .pos = &s_pos};
    assert_int_equal(model_forward(ctx, &b, again, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "shared"));
    assert_int_equal(kv_seq_len(kv, 1), 5);
    /* undo by hand */
    kv->refcount[b2]--;
    s1->n_blocks = 0;
    s1->n_pos = 0;
    kv_seq_remove(kv, 1);
    /* an inactive sequence is refused too */
    assert_int_equal(kv_seq_check_writable(kv, 1, 0, &err), STRATA_EINVAL);
    free(logits);
    free(again);
    model_ctx_free(ctx);
    model_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizing),
        cmocka_unit_test(test_row_types),
        cmocka_unit_test(test_sequences_and_blocks),
        cmocka_unit_test(test_forward_batch_checks),
        cmocka_unit_test(test_write_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
