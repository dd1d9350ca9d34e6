/* q8_0 KV rows across slot reuse, rewind and prefix reuse, through the
 * whole forward pass, bit for bit:
 * - a slot that served one sequence then serves another gives the logits
 *   of a fresh cache (the pool hands the same low blocks back, with the
 *   first sequence's rows still in them past the new one's length);
 * - rewinding a sequence (a batch starting before its length, as
 *   model_forward truncates, or kv_seq_truncate then a batch) and feeding
 *   the same tokens gives the first run's logits; other tokens give those
 *   of a fresh run of the new sequence;
 * - a prompt served from the prefix cache (mid-block, and whole, with its
 *   copy on write) gives the cold run's logits.
 * For q8_0 keys and values, and f16 keys with q8_0 values. The models are
 * test_kv_q8.c's (head size a multiple of 32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gguf/types.h"
#include "model/kv_prefix.h"
#include "model_testutil.h"

static model_ctx *ctx_typed(const model *m, int64_t n_ctx, int n_seq, int64_t n_batch,
                            uint32_t kt, uint32_t vt)
{
    model_ctx_params p = {.n_ctx = n_ctx, .n_seq_max = n_seq, .n_threads = 1,
                          .n_batch = n_batch, .k_type = kt, .v_type = vt};
    model_ctx *ctx = NULL;
    strata_err err;
    if (model_ctx_init(&ctx, m, &p, &err) != 0) fail_msg("model_ctx_init: %s", err.msg);
    return ctx;
}

/* Feeds toks[0, n) to seq at positions pos0.. and writes every logit row. */
static void feed(model_ctx *ctx, int32_t seq, const int32_t *toks, int64_t pos0, int64_t n,
                 float *logits)
{
    int32_t seqs[128], pos[128];
    assert_true(n <= 128);
    for (int64_t i = 0; i < n; i++) {
        seqs[i] = seq;
        pos[i] = (int32_t)(pos0 + i);
    }
    model_batch b = {.n_tokens = n, .tokens = toks, .seq_ids = seqs, .pos = pos};
    strata_err err;
    if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("model_forward: %s", err.msg);
}

static void fill(int32_t *t, int64_t n, uint32_t seed, int64_t n_vocab)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(n_vocab - 3));
    }
}

static void check(const char *rel, uint32_t kt, uint32_t vt)
{
    model *m = NULL;
    MT_OPEN(m, rel);
    const int64_t nv = m->hp.n_vocab;
    const size_t row = (size_t)nv * sizeof(float);
    strata_err err;
    int32_t a[70], bt[45], ab[90];
    fill(a, 70, 7, nv);
    fill(bt, 45, 8, nv);
    float *ref = malloc(90 * row), *got = malloc(90 * row), *first = malloc(90 * row);

    /* slot reuse: B after A in slot 0, then in slot 1 */
    model_ctx *fresh = ctx_typed(m, 128, 1, 0, kt, vt);
    mt_eval(fresh, 0, bt, 45, ref);
    model_ctx_free(fresh);
    model_ctx *c = ctx_typed(m, 256, 2, 0, kt, vt);
    mt_eval(c, 0, a, 70, first);
    mt_eval(c, 0, bt, 45, got);
    if (memcmp(got, ref, 45 * row) != 0) fail_msg("%s: slot 0 reused differs from fresh", rel);
    mt_eval(c, 1, a, 70, first);
    mt_eval(c, 0, bt, 45, got);
    if (memcmp(got, ref, 45 * row) != 0) fail_msg("%s: slot reused after another differs", rel);

    /* rewind: the same tokens again, then other tokens */
    assert_int_equal(kv_seq_add(model_ctx_kv(c), 0, &err), 0);
    feed(c, 0, a, 0, 70, first);
    feed(c, 0, a + 69, 69, 1, got);
    if (memcmp(got, first + 69 * nv, row) != 0) fail_msg("%s: rewind to 69 differs", rel);
    feed(c, 0, a + 40, 40, 30, got); /* mid-block */
    if (memcmp(got, first + 40 * nv, 30 * row) != 0) fail_msg("%s: rewind to 40 differs", rel);
    kv_seq_truncate(model_ctx_kv(c), 0, 32);
    feed(c, 0, a + 32, 32, 38, got); /* block boundary */
    if (memcmp(got, first + 32 * nv, 38 * row) != 0) fail_msg("%s: rewind to 32 differs", rel);
    memcpy(ab, a, 37 * sizeof(int32_t));
    memcpy(ab + 37, bt, 45 * sizeof(int32_t));
    feed(c, 0, bt, 37, 45, got);
    kv_seq_remove(model_ctx_kv(c), 0);
    fresh = ctx_typed(m, 128, 1, 7, kt, vt);
    mt_eval(fresh, 0, ab, 82, ref);
    model_ctx_free(fresh);
    if (memcmp(got, ref + 37 * nv, 45 * row) != 0) fail_msg("%s: rewind, new tokens differ", rel);
    model_ctx_free(c);

    /* prefix reuse: ab published; a prompt sharing 2 blocks, then the
     * whole 64-token prefix (copy on write of its last block) */
    c = ctx_typed(m, 256, 2, 0, kt, vt);
    kv_cache *kv = model_ctx_kv(c);
    if (kv_prefix_enable(kv, -1, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    feed(c, 0, ab, 0, 82, got);
    kv_prefix_publish(kv, 0, ab);
    kv_seq_remove(kv, 0);
    int32_t p2[80];
    memcpy(p2, ab, 64 * sizeof(int32_t));
    fill(p2 + 64, 16, 9, nv);
    fresh = ctx_typed(m, 128, 1, 7, kt, vt);
    mt_eval(fresh, 0, p2, 80, ref);
    model_ctx_free(fresh);
    int64_t reused = 0;
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 1, p2, 80, 0, &reused, &err), 0);
    assert_int_equal(reused, 64);
    feed(c, 1, p2 + 64, 64, 16, got);
    if (memcmp(got, ref + 64 * nv, 16 * row) != 0) fail_msg("%s: prefix reuse differs", rel);
    /* sequence 1 still holds the blocks while sequence 0 takes them whole */
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_reuse_prefix(kv, 0, p2, 64, 0, &reused, &err), 0);
    assert_int_equal(reused, 63);
    feed(c, 0, p2 + 63, 63, 17, got);
    if (memcmp(got, ref + 63 * nv, 17 * row) != 0) fail_msg("%s: whole-prefix reuse differs", rel);
    model_ctx_free(c);
    print_message("%s k %s v %s: slot reuse, rewind, prefix reuse bit-identical\n", rel,
                  strata_type_name(kt), strata_type_name(vt));
    free(ref);
    free(got);
    free(first);
    model_close(m);
}

static void test_reuse_rewind_prefix(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    const uint32_t F = STRATA_TYPE_F16, Q = STRATA_TYPE_Q8_0;
    check("golden/models/qwen2-Q8_0.gguf", F, F);
    check("golden/models/qwen2-Q8_0.gguf", Q, Q);
    check("golden/models/qwen2-Q8_0.gguf", F, Q);
    check("golden/models/llama-Q4_K.gguf", Q, Q);
    check("golden/models/llama-Q4_K.gguf", F, Q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_rewind_prefix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
