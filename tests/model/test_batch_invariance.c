/* Batch invariance: a sequence's logits are bit-for-bit the same whether it
 * runs alone or in a batch with other sequences of different lengths,
 * whatever the chunk size, the thread count (1 or 2), the order of the
 * tokens in the batch, the slot it has, the physical KV blocks it gets
 * (including blocks another sequence used before), and whether its tokens
 * came as one prefill batch or one decode step at a time. Checked on
 * models that cover each activation path: Q8_K (Q4_K), Q8_0 with biases and
 * tied output (qwen2), F16 with per-head q/k norms (qwen3), F32 (stories,
 * head size 8), and Q8_0 gemma3 (a sliding window of 8 in layer 0, with
 * its masking in tiles that start inside or before the window), and Q8_0
 * qwen3moe, Q4_K_M qwen3moe and Q8_0 gpt-oss (experts run over the tokens
 * that chose them, so a token's expert products share a dispatch with
 * whatever else the batch routed there; repacked experts, Q6_K among them,
 * expert biases and the clamped activation). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model_testutil.h"

#include <inttypes.h>

#define N_SEQ 4

/* Lengths chosen to cross KV block boundaries (32) differently. */
static const int64_t g_len[N_SEQ] = {70, 23, 41, 33};

typedef struct seq_data {
    int32_t ids[128];
    int64_t n;
    float *ref; /* (n, n_vocab) logits of the sequence evaluated alone */
} seq_data;

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void make_seqs(seq_data *s, int64_t n_vocab, uint32_t seed)
{
    for (int k = 0; k < N_SEQ; k++) {
        s[k].n = g_len[k];
        s[k].ids[0] = 1;
        for (int64_t i = 1; i < s[k].n; i++) {
            s[k].ids[i] = 3 + (int32_t)(lcg(&seed) % (uint32_t)(n_vocab - 3));
        }
    }
}

/* Compares one produced row with the reference row, bit for bit. */
static void same_row(const char *what, const float *got, const seq_data *s, int k, int64_t pos,
                     int64_t n_vocab)
{
    if (memcmp(got, s[k].ref + pos * n_vocab, (size_t)n_vocab * sizeof(float)) != 0) {
        int64_t i = 0;
        while (got[i] == s[k].ref[pos * n_vocab + i]) i++;
        fail_msg("%s: sequence %d position %" PRId64 " differs from alone (logit %" PRId64
                 ": %.9g vs %.9g)",
                 what, k, pos, i, got[i], s[k].ref[pos * n_vocab + i]);
    }
}

/* All sequences' tokens in one batch, interleaved round-robin (a
 * different order from any single sequence's), in slots shifted by
 * `slot_shift`, with chunks of n_batch and n_threads threads. */
static void run_interleaved(const model *m, seq_data *s, int n_threads, int64_t n_batch,
                            int slot_shift)
{
    const int64_t n_vocab = m->hp.n_vocab;
    model_ctx *ctx = mt_ctx(m, 512, N_SEQ + slot_shift, n_threads, n_batch);
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;
    int64_t total = 0;
    for (int k = 0; k < N_SEQ; k++) {
        total += s[k].n;
        assert_int_equal(kv_seq_add(kv, k + slot_shift, &err), 0);
    }
    int32_t *tok = malloc((size_t)total * sizeof(int32_t));
    int32_t *seq = malloc((size_t)total * sizeof(int32_t));
    int32_t *pos = malloc((size_t)total * sizeof(int32_t));
    int *which = malloc((size_t)total * sizeof(int));
    int64_t n = 0, next[N_SEQ] = {0};
    while (n < total) {
        for (int k = N_SEQ - 1; k >= 0; k--) {
            if (next[k] == s[k].n) continue;
            tok[n] = s[k].ids[next[k]];
            seq[n] = k + slot_shift;
            pos[n] = (int32_t)next[k]++;
            which[n++] = k;
        }
    }
    float *logits = malloc((size_t)(total * n_vocab) * sizeof(float));
    model_batch b = {.n_tokens = total, .tokens = tok, .seq_ids = seq, .pos = pos};
    if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("%s", err.msg);
    char what[96];
    snprintf(what, sizeof(what), "interleaved, %d threads, chunks of %" PRId64, n_threads,
             n_batch);
    for (int64_t i = 0; i < total; i++) same_row(what, logits + i * n_vocab, s, which[i], pos[i], n_vocab);
    free(tok);
    free(seq);
    free(pos);
    free(which);
    free(logits);
    model_ctx_free(ctx);
}

/* Continuous batching: a prefill of the first tokens of some sequences,
 * then steps that each carry the next token of every unfinished sequence
 * (and the prompt of a late one); finished sequences leave and a new one
 * takes the freed slot and blocks (which hold stale rows). Only the
 * tokens asked for return logits. */
static void run_decode_mix(const model *m, seq_data *s, int n_threads)
{
    const int64_t n_vocab = m->hp.n_vocab;
    model_ctx *ctx = mt_ctx(m, 256, 2, n_threads, 0);
    kv_cache *kv = model_ctx_kv(ctx);
    strata_err err;
    int32_t tok[16], seq[16], pos[16];
    int8_t want[16];
    int slot_of[N_SEQ] = {0, 1, -1, -1}; /* sequences 2 and 3 wait for a slot */
    int64_t next[N_SEQ] = {0};
    float *logits = malloc((size_t)(16 * n_vocab) * sizeof(float));
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    assert_int_equal(kv_seq_add(kv, 1, &err), 0);
    int done = 0, steps = 0;
    while (done < N_SEQ) {
        int n = 0, who[16];
        for (int k = 0; k < N_SEQ; k++) {
            if (slot_of[k] < 0 || next[k] == s[k].n) continue;
            /* prefill 5 tokens at once at the start, then one per step */
            int64_t take = next[k] == 0 ? 5 : 1;
            for (int64_t j = 0; j < take && next[k] < s[k].n; j++) {
                tok[n] = s[k].ids[next[k]];
                seq[n] = slot_of[k];
                pos[n] = (int32_t)next[k]++;
                want[n] = (int8_t)(j == take - 1 || pos[n] % 2 == 0);
                who[n++] = k;
            }
        }
        assert_true(n > 0);
        model_batch b = {.n_tokens = n, .tokens = tok, .seq_ids = seq, .pos = pos,
                         .want_logits = want};
        if (model_forward(ctx, &b, logits, &err) != 0) fail_msg("step %d: %s", steps, err.msg);
        int r = 0;
        for (int i = 0; i < n; i++) {
            if (!want[i]) continue;
            same_row("decode mix", logits + r * n_vocab, s, who[i], pos[i], n_vocab);
            r++;
        }
        /* finished sequences leave; a waiting one takes the slot */
        for (int k = 0; k < N_SEQ; k++) {
            if (slot_of[k] < 0 || next[k] != s[k].n) continue;
            int slot = slot_of[k];
            kv_seq_remove(kv, slot);
            slot_of[k] = -2;
            done++;
            for (int w = 0; w < N_SEQ; w++) {
                if (slot_of[w] == -1) {
                    slot_of[w] = slot;
                    assert_int_equal(kv_seq_add(kv, slot, &err), 0);
                    break;
                }
            }
        }
        steps++;
    }
    free(logits);
    model_ctx_free(ctx);
}

/* Rewinding: after the whole of sequence 0, going back to position 30 with
 * other tokens gives what a fresh run of those tokens gives. */
static void run_rewind(const model *m, seq_data *s)
{
    const int64_t n_vocab = m->hp.n_vocab;
    model_ctx *ctx = mt_ctx(m, 256, 1, 2, 0);
    float *logits = malloc((size_t)(s[0].n * n_vocab) * sizeof(float));
    strata_err err;
    kv_cache *kv = model_ctx_kv(ctx);
    assert_int_equal(kv_seq_add(kv, 0, &err), 0);
    int32_t seq[128] = {0}, pos[128];
    for (int i = 0; i < 128; i++) pos[i] = i;
    model_batch b = {.n_tokens = s[0].n, .tokens = s[0].ids, .seq_ids = seq, .pos = pos};
    assert_int_equal(model_forward(ctx, &b, logits, &err), 0);
    int32_t fork_ids[128];
    memcpy(fork_ids, s[0].ids, 30 * sizeof(int32_t));
    memcpy(fork_ids + 30, s[1].ids, (size_t)s[1].n * sizeof(int32_t));
    model_batch r = {.n_tokens = s[1].n, .tokens = fork_ids + 30, .seq_ids = seq, .pos = pos + 30};
    assert_int_equal(model_forward(ctx, &r, logits, &err), 0);
    assert_int_equal(kv_seq_len(kv, 0), 30 + s[1].n);
    /* the reference: a fresh context, the forked tokens in one batch */
    model_ctx *fresh = mt_ctx(m, 256, 1, 1, 0);
    float *ref = malloc((size_t)((30 + s[1].n) * n_vocab) * sizeof(float));
    mt_eval(fresh, 0, fork_ids, 30 + s[1].n, ref);
    assert_memory_equal(logits, ref + 30 * n_vocab, (size_t)(s[1].n * n_vocab) * sizeof(float));
    free(ref);
    free(logits);
    model_ctx_free(fresh);
    model_ctx_free(ctx);
}

static void check_model(const char *rel, uint32_t seed)
{
    model *m = NULL;
    MT_OPEN(m, rel);
    const int64_t n_vocab = m->hp.n_vocab;
    seq_data s[N_SEQ];
    make_seqs(s, n_vocab, seed);
    /* references: each sequence alone, one thread, one batch */
    model_ctx *ctx = mt_ctx(m, 128, 1, 1, 0);
    for (int k = 0; k < N_SEQ; k++) {
        s[k].ref = malloc((size_t)(s[k].n * n_vocab) * sizeof(float));
        mt_eval(ctx, 0, s[k].ids, s[k].n, s[k].ref);
    }
    model_ctx_free(ctx);

    run_interleaved(m, s, 2, 512, 0);
    run_interleaved(m, s, 1, 7, 1);
    run_interleaved(m, s, 2, 32, 2);
    run_decode_mix(m, s, 1);
    run_decode_mix(m, s, 2);
    run_rewind(m, s);
    print_message("%s: bit-identical alone, interleaved (1-2 threads, chunks 7-512), in "
                  "decode steps with slot reuse, and after a rewind\n",
                  rel);
    for (int k = 0; k < N_SEQ; k++) free(s[k].ref);
    model_close(m);
}

static void test_llama_q4_k(void **state)
{
    (void)state;
    check_model("golden/models/llama-Q4_K.gguf", 11);
}

static void test_qwen2_q8_0(void **state)
{
    (void)state;
    check_model("golden/models/qwen2-Q8_0.gguf", 12);
}

static void test_qwen3_f16(void **state)
{
    (void)state;
    check_model("golden/models/qwen3-F16.gguf", 13);
}

static void test_gemma3_q8_0(void **state)
{
    (void)state;
    check_model("golden/models/gemma3-Q8_0.gguf", 15);
}

static void test_qwen3moe_q8_0(void **state)
{
    (void)state;
    check_model("golden/models/qwen3moe-Q8_0.gguf", 16);
}

static void test_qwen3moe_q4_k_m(void **state)
{
    (void)state;
    check_model("golden/models/qwen3moe-Q4_K_M.gguf", 17);
}

static void test_gptoss_q8_0(void **state)
{
    (void)state;
    check_model("golden/models/gpt-oss-Q8_0.gguf", 18);
}

static void test_stories_f32(void **state)
{
    (void)state;
    check_model("models/stories260K.gguf", 14);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_q4_k),
        cmocka_unit_test(test_qwen2_q8_0),
        cmocka_unit_test(test_qwen3_f16),
        cmocka_unit_test(test_stories_f32),
        cmocka_unit_test(test_gemma3_q8_0),
        cmocka_unit_test(test_qwen3moe_q8_0),
        cmocka_unit_test(test_qwen3moe_q4_k_m),
        cmocka_unit_test(test_gptoss_q8_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
