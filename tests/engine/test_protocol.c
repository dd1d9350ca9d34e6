/* The engine protocol codec (src/engine/protocol.c): every message of both
 * directions survives encode → decode unchanged; bad lines are refused with
 * a message naming the problem and the id when it could be read; the line
 * reader gives the same lines at every split of its input and skips an
 * oversized line without losing the next one. */
#include "engine/protocol.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Encodes m to one line (checked to end in its only '\n') and decodes it. */
static int decode_str(const char *s, proto_dir dir, proto_msg *m, proto_error *pe);

static void roundtrip(const proto_msg *m, proto_dir dir, proto_msg *back, char **line_out)
{
    proto_buf b = {0};
    strata_err err;
    int rc = proto_encode(m, &b, &err);
    if (rc != 0) fail_msg("encode: %s", err.msg);
    assert_true(b.len > 0);
    assert_int_equal(b.data[b.len - 1], '\n');
    assert_null(memchr(b.data, '\n', b.len - 1));
    proto_error pe;
    rc = proto_decode(b.data, b.len - 1, dir, back, &pe);
    if (rc != 0) fail_msg("decode of %.*s: %s", (int)b.len, b.data, pe.message);
    assert_int_equal(back->op, m->op);
    if (line_out) {
        *line_out = strndup(b.data, b.len - 1);
    }
    proto_buf_free(&b);
}

static void test_gen_roundtrip(void **state)
{
    (void)state;
    int32_t toks[] = {1, 15043, 2147483647, 0};
    int32_t stops[] = {2, 13};
    proto_bias bias[] = {{5, 1.5f}, {7, -INFINITY}, {9, -0.25f}};
    proto_msg m = {.op = PROTO_OP_GEN, .has_id = true, .id = PROTO_ID_MAX};
    m.u.gen.tokens = toks;
    m.u.gen.n_tokens = 4;
    m.u.gen.max_tokens = 64;
    m.u.gen.sampling = proto_sampling_default();
    m.u.gen.sampling.temperature = 0.7f;
    m.u.gen.sampling.top_k = 0;
    m.u.gen.sampling.top_p = 0.9f;
    m.u.gen.sampling.min_p = 0.1f;
    m.u.gen.sampling.typical_p = 0.5f;
    m.u.gen.sampling.repeat_penalty = 1.1f;
    m.u.gen.sampling.presence_penalty = 0.3f;
    m.u.gen.sampling.frequency_penalty = -0.2f;
    m.u.gen.sampling.penalty_last_n = 128;
    m.u.gen.sampling.top_n_sigma = 1.5f;
    m.u.gen.sampling.xtc_probability = 0.25f;
    m.u.gen.sampling.xtc_threshold = 0.125f;
    m.u.gen.sampling.dynatemp_range = 0.75f;
    m.u.gen.sampling.dynatemp_exponent = 2.0f;
    m.u.gen.sampling.mirostat = 2;
    m.u.gen.sampling.mirostat_tau = 3.5f;
    m.u.gen.sampling.mirostat_eta = 0.25f;
    m.u.gen.sampling.dry_multiplier = 0.75f;
    m.u.gen.sampling.dry_base = 1.5f;
    m.u.gen.sampling.dry_allowed_length = 3;
    m.u.gen.sampling.dry_penalty_last_n = 256;
    m.u.gen.sampling.n_dry_breakers = 2;
    strcpy(m.u.gen.sampling.dry_breakers[0], "\n");
    strcpy(m.u.gen.sampling.dry_breakers[1], "say \"");
    m.u.gen.sampling.has_seed = true;
    m.u.gen.sampling.seed = (uint64_t)INT64_MAX;
    m.u.gen.sampling.logit_bias = bias;
    m.u.gen.sampling.n_logit_bias = 3;
    m.u.gen.stop_tokens = stops;
    m.u.gen.n_stop_tokens = 2;
    m.u.gen.ignore_eos = true;
    m.u.gen.min_tokens = 7;
    int32_t allowed[2] = {5, 9};
    m.u.gen.allowed_tokens = allowed;
    m.u.gen.n_allowed_tokens = 2;
    int32_t bad_ids[3] = {4, 6, 8}, bad_len[2] = {1, 2};
    m.u.gen.bad_ids = bad_ids;
    m.u.gen.bad_len = bad_len;
    m.u.gen.n_bad = 2;
    m.u.gen.logprobs = 5;
    m.u.gen.prompt_logprobs = true;
    m.u.gen.prompt_top = 4;
    m.u.gen.progress = true;
    int32_t min_bans[2] = {11, 12};
    m.u.gen.min_bans = min_bans;
    m.u.gen.n_min_bans = 2;
    m.u.gen.no_cache = true;
    proto_msg r;
    char *line;
    roundtrip(&m, PROTO_DIR_TO_ENGINE, &r, &line);
    assert_non_null(strstr(line, "\"cache\":false"));
    assert_non_null(strstr(line, "\"prompt_logprobs\":4"));
    /* op first on the wire */
    assert_memory_equal(line, "{\"op\":\"gen\",\"id\":9007199254740991,", 34);
    free(line);
    assert_true(r.has_id);
    assert_int_equal(r.id, PROTO_ID_MAX);
    assert_int_equal(r.u.gen.n_tokens, 4);
    assert_memory_equal(r.u.gen.tokens, toks, sizeof(toks));
    assert_int_equal(r.u.gen.max_tokens, 64);
    const proto_sampling *s = &r.u.gen.sampling;
    assert_true(s->temperature == 0.7f && s->top_k == 0 && s->top_p == 0.9f && s->min_p == 0.1f);
    assert_true(s->typical_p == 0.5f && s->repeat_penalty == 1.1f);
    assert_true(s->presence_penalty == 0.3f && s->frequency_penalty == -0.2f);
    assert_int_equal(s->penalty_last_n, 128);
    assert_true(s->top_n_sigma == 1.5f && s->xtc_probability == 0.25f && s->xtc_threshold == 0.125f);
    assert_true(s->dynatemp_range == 0.75f && s->dynatemp_exponent == 2.0f);
    assert_true(s->mirostat == 2 && s->mirostat_tau == 3.5f && s->mirostat_eta == 0.25f);
    assert_true(s->dry_multiplier == 0.75f && s->dry_base == 1.5f && s->dry_allowed_length == 3);
    assert_int_equal(s->dry_penalty_last_n, 256);
    assert_int_equal(s->n_dry_breakers, 2);
    assert_string_equal(s->dry_breakers[1], "say \"");
    assert_true(s->has_seed);
    assert_true(s->seed == (uint64_t)INT64_MAX);
    assert_int_equal(s->n_logit_bias, 3);
    assert_int_equal(s->logit_bias[1].token, 7);
    assert_true(isinf(s->logit_bias[1].bias) && s->logit_bias[1].bias < 0);
    assert_true(s->logit_bias[2].bias == -0.25f);
    assert_int_equal(r.u.gen.n_stop_tokens, 2);
    assert_int_equal(r.u.gen.stop_tokens[1], 13);
    assert_true(r.u.gen.ignore_eos);
    assert_int_equal(r.u.gen.min_tokens, 7);
    assert_int_equal(r.u.gen.n_allowed_tokens, 2);
    assert_int_equal(r.u.gen.allowed_tokens[1], 9);
    assert_int_equal(r.u.gen.n_bad, 2);
    assert_int_equal(r.u.gen.bad_len[1], 2);
    assert_int_equal(r.u.gen.bad_ids[2], 8);
    assert_int_equal(r.u.gen.logprobs, 5);
    assert_true(r.u.gen.prompt_logprobs);
    assert_int_equal(r.u.gen.prompt_top, 4);
    assert_true(r.u.gen.progress);
    assert_int_equal(r.u.gen.n_min_bans, 2);
    assert_int_equal(r.u.gen.min_bans[1], 12);
    assert_true(r.u.gen.no_cache);
    proto_msg_free(&r);

    /* logprobs: chosen only is `true` on the wire and 0 in the struct */
    m.u.gen.logprobs = 0;
    m.u.gen.prompt_top = 0; /* the prompt's own only: `true` */
    m.u.gen.sampling.n_logit_bias = 0;
    m.u.gen.sampling.has_seed = false;
    m.u.gen.no_cache = false;
    roundtrip(&m, PROTO_DIR_TO_ENGINE, &r, &line);
    assert_null(strstr(line, "cache")); /* the default is not written */
    assert_false(r.u.gen.no_cache);
    assert_non_null(strstr(line, "\"logprobs\":true"));
    assert_null(strstr(line, "seed"));
    assert_int_equal(r.u.gen.logprobs, 0);
    assert_non_null(strstr(line, "\"prompt_logprobs\":true"));
    assert_true(r.u.gen.prompt_logprobs);
    assert_int_equal(r.u.gen.prompt_top, 0);
    assert_false(r.u.gen.sampling.has_seed);
    free(line);
    proto_msg_free(&r);
    /* none: not written, and absent, false or 0 decode as none */
    m.u.gen.prompt_logprobs = false;
    roundtrip(&m, PROTO_DIR_TO_ENGINE, &r, &line);
    assert_null(strstr(line, "prompt_logprobs"));
    assert_false(r.u.gen.prompt_logprobs);
    free(line);
    proto_msg_free(&r);
    assert_int_equal(decode_str("{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"prompt_logprobs\":0}",
                                PROTO_DIR_TO_ENGINE, &r, &(proto_error){0}), 0);
    assert_false(r.u.gen.prompt_logprobs);
    proto_msg_free(&r);
    assert_int_equal(decode_str("{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"prompt_logprobs\":21}",
                                PROTO_DIR_TO_ENGINE, &r, &(proto_error){0}), STRATA_EFORMAT);
}

static int decode_str(const char *s, proto_dir dir, proto_msg *m, proto_error *pe)
{
    return proto_decode(s, strlen(s), dir, m, pe);
}

static void test_gen_defaults(void **state)
{
    (void)state;
    proto_msg m;
    proto_error pe;
    assert_int_equal(decode_str("{\"id\":3,\"tokens\":[1],\"op\":\"gen\",\"future\":{\"x\":1}}",
                                PROTO_DIR_TO_ENGINE, &m, &pe), 0);
    proto_sampling d = proto_sampling_default();
    assert_int_equal(m.u.gen.max_tokens, -1);
    assert_true(m.u.gen.sampling.temperature == d.temperature);
    assert_int_equal(m.u.gen.sampling.top_k, 40);
    assert_int_equal(m.u.gen.sampling.penalty_last_n, 64);
    assert_false(m.u.gen.sampling.has_seed);
    assert_int_equal(m.u.gen.logprobs, -1);
    assert_false(m.u.gen.ignore_eos);
    assert_false(m.u.gen.no_cache);
    assert_int_equal(m.u.gen.n_stop_tokens, 0);
    proto_msg_free(&m);
    /* the prefix cache opt-out, on embed too; null is absent */
    assert_int_equal(decode_str("{\"op\":\"embed\",\"id\":3,\"tokens\":[1],\"cache\":false}",
                                PROTO_DIR_TO_ENGINE, &m, &pe), 0);
    assert_true(m.u.embed.no_cache);
    proto_msg_free(&m);
    assert_int_equal(decode_str("{\"op\":\"gen\",\"id\":3,\"tokens\":[1],\"cache\":null}",
                                PROTO_DIR_TO_ENGINE, &m, &pe), 0);
    assert_false(m.u.gen.no_cache);
    proto_msg_free(&m);
    /* the object form of logit_bias, logprobs 0 = none */
    assert_int_equal(decode_str("{\"op\":\"gen\",\"id\":3,\"tokens\":[1],\"logprobs\":0,"
                                "\"sampling\":{\"logit_bias\":{\"12\":-3,\"4\":false},"
                                "\"seed\":null}}",
                                PROTO_DIR_TO_ENGINE, &m, &pe), 0);
    assert_int_equal(m.u.gen.logprobs, -1);
    assert_int_equal(m.u.gen.sampling.n_logit_bias, 2);
    assert_int_equal(m.u.gen.sampling.logit_bias[0].token, 12);
    assert_true(m.u.gen.sampling.logit_bias[0].bias == -3.0f);
    assert_true(isinf(m.u.gen.sampling.logit_bias[1].bias));
    proto_msg_free(&m);
}

static void test_other_messages_roundtrip(void **state)
{
    (void)state;
    proto_msg r;
    int32_t toks[] = {3, 4};

    proto_msg e = {.op = PROTO_OP_EMBED, .has_id = true, .id = 0,
                   .u.embed = {.tokens = toks, .n_tokens = 2, .pooling = PROTO_POOLING_CLS}};
    roundtrip(&e, PROTO_DIR_TO_ENGINE, &r, NULL);
    assert_int_equal(r.u.embed.pooling, PROTO_POOLING_CLS);
    assert_int_equal(r.u.embed.n_tokens, 2);
    proto_msg_free(&r);

    proto_op simple[] = {PROTO_OP_STOP, PROTO_OP_PING, PROTO_OP_SHUTDOWN};
    for (size_t i = 0; i < 3; i++) {
        proto_msg s = {.op = simple[i], .has_id = simple[i] != PROTO_OP_SHUTDOWN, .id = 77};
        char *line;
        roundtrip(&s, PROTO_DIR_TO_ENGINE, &r, &line);
        assert_int_equal(r.has_id, s.has_id);
        if (s.has_id) assert_int_equal(r.id, 77);
        if (simple[i] == PROTO_OP_SHUTDOWN) assert_string_equal(line, "{\"op\":\"shutdown\"}");
        free(line);
        proto_msg_free(&r);
    }

    proto_msg rd = {.op = PROTO_OP_READY};
    rd.u.ready = (proto_ready){.protocol = 1, .arch = "llama", .n_ctx_train = 2048,
                               .n_vocab = 512, .n_embd = 64, .n_layer = 5, .slots = 4,
                               .n_ctx = 512, .n_batch = 256, .kv_type = "f16",
                               .kv_block_tokens = 32, .kv_n_blocks = 64, .kv_bytes = 1 << 20,
                               .kv_prefix_cache = true, .kv_cache_blocks = 48,
                               .kv_cache_bytes = 786432, .kv_cache_min_tokens = 64};
    roundtrip(&rd, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_string_equal(r.u.ready.arch, "llama");
    assert_string_equal(r.u.ready.kv_type, "f16");
    assert_int_equal(r.u.ready.n_vocab, 512);
    assert_int_equal(r.u.ready.slots, 4);
    assert_int_equal(r.u.ready.kv_bytes, 1 << 20);
    /* the prefix cache's configuration */
    assert_true(r.u.ready.kv_prefix_cache);
    assert_int_equal(r.u.ready.kv_cache_blocks, 48);
    assert_int_equal(r.u.ready.kv_cache_bytes, 786432);
    assert_int_equal(r.u.ready.kv_cache_min_tokens, 64);
    proto_msg_free(&r);
    /* an older engine's ready without them: off */
    assert_int_equal(
        decode_str("{\"op\":\"ready\",\"protocol\":1,\"model\":{\"arch\":\"llama\","
                   "\"n_ctx_train\":1,\"n_vocab\":2,\"n_embd\":3},\"slots\":1,\"n_ctx\":8,"
                   "\"kv\":{\"type\":\"f16\"}}",
                   PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
        0);
    assert_false(r.u.ready.kv_prefix_cache);
    assert_int_equal(r.u.ready.kv_cache_blocks, 0);
    proto_msg_free(&r);
    assert_int_equal(
        decode_str("{\"op\":\"ready\",\"protocol\":1,\"model\":{\"arch\":\"llama\","
                   "\"n_ctx_train\":1,\"n_vocab\":2,\"n_embd\":3},\"slots\":1,\"n_ctx\":8,"
                   "\"kv\":{\"type\":\"f16\",\"prefix_cache\":1}}",
                   PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
        STRATA_EFORMAT);

    proto_top top[] = {{450, -0.125f}, {263, -2.5f}};
    proto_logprob lps[] = {{450, -0.125f, top, 2}, {13, -1e-7f, NULL, 0}};
    int32_t gen[] = {450, 13};
    proto_msg t = {.op = PROTO_OP_TOK, .has_id = true, .id = 5,
                   .u.tok = {.tokens = gen, .n_tokens = 2, .logprobs = lps}};
    roundtrip(&t, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.tok.n_tokens, 2);
    assert_non_null(r.u.tok.logprobs);
    assert_int_equal(r.u.tok.logprobs[0].n_top, 2);
    assert_true(r.u.tok.logprobs[0].top[1].logprob == -2.5f);
    assert_true(r.u.tok.logprobs[1].logprob == -1e-7f);
    assert_int_equal(r.u.tok.logprobs[1].n_top, 0);
    proto_msg_free(&r);

    /* prompt progress */
    proto_msg prog = {.op = PROTO_OP_PROG, .has_id = true, .id = 5,
                      .u.prog = {.processed = 64, .total = 100, .cached = 32, .ms = 12.5}};
    roundtrip(&prog, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.prog.processed, 64);
    assert_int_equal(r.u.prog.total, 100);
    assert_int_equal(r.u.prog.cached, 32);
    assert_true(r.u.prog.ms == 12.5);
    proto_msg_free(&r);
    assert_int_equal(decode_str("{\"op\":\"prog\",\"id\":5,\"processed\":101,\"total\":100,\"cached\":0,\"ms\":1}",
                                PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
                     STRATA_EFORMAT);
    assert_int_equal(decode_str("{\"op\":\"prog\",\"id\":5,\"processed\":1,\"total\":100,\"cached\":0}",
                                PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
                     STRATA_EFORMAT);

    /* prompt logprobs: from, rank; a plp without entries, from 0 or a bad
     * rank does not decode; the server's direction only */
    proto_logprob plps[] = {{411, -3.25f, top, 2, 7}, {336, -0.5f, NULL, 0, 1}};
    proto_msg pl = {.op = PROTO_OP_PLP, .has_id = true, .id = 5,
                    .u.plp = {.from = 3, .logprobs = plps, .n = 2}};
    char *pline;
    roundtrip(&pl, PROTO_DIR_TO_SERVER, &r, &pline);
    assert_memory_equal(pline, "{\"op\":\"plp\",\"id\":5,\"from\":3,", 28);
    free(pline);
    assert_int_equal(r.u.plp.from, 3);
    assert_int_equal(r.u.plp.n, 2);
    assert_int_equal(r.u.plp.logprobs[0].token, 411);
    assert_int_equal(r.u.plp.logprobs[0].rank, 7);
    assert_int_equal(r.u.plp.logprobs[0].n_top, 2);
    assert_true(r.u.plp.logprobs[0].top[0].logprob == -0.125f);
    assert_true(r.u.plp.logprobs[1].logprob == -0.5f);
    assert_int_equal(r.u.plp.logprobs[1].rank, 1);
    proto_msg_free(&r);
    const char *bad_plp[] = {
        "{\"op\":\"plp\",\"id\":5,\"from\":1,\"logprobs\":[]}",
        "{\"op\":\"plp\",\"id\":5,\"from\":0,\"logprobs\":[{\"token\":1,\"logprob\":-1}]}",
        "{\"op\":\"plp\",\"id\":5,\"logprobs\":[{\"token\":1,\"logprob\":-1}]}",
        "{\"op\":\"plp\",\"id\":5,\"from\":1,\"logprobs\":[{\"token\":1,\"logprob\":-1,\"rank\":0}]}",
        "{\"op\":\"plp\",\"from\":1,\"logprobs\":[{\"token\":1,\"logprob\":-1}]}",
    };
    for (size_t i = 0; i < sizeof(bad_plp) / sizeof(bad_plp[0]); i++) {
        assert_int_equal(decode_str(bad_plp[i], PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
                         STRATA_EFORMAT);
    }
    assert_int_equal(decode_str("{\"op\":\"plp\",\"id\":5,\"from\":1,\"logprobs\":[{\"token\":1,"
                                "\"logprob\":-1}]}", PROTO_DIR_TO_ENGINE, &r, &(proto_error){0}),
                     STRATA_EFORMAT);

    /* floats round-trip exactly */
    float vec[] = {0.1f, -1.0f / 3.0f, 1e-30f, 3.4e38f, 0.0f};
    proto_msg em = {.op = PROTO_OP_EMB, .has_id = true, .id = 6, .u.emb = {vec, 5}};
    roundtrip(&em, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.emb.n, 5);
    assert_memory_equal(r.u.emb.vector, vec, sizeof(vec));
    proto_msg_free(&r);

    proto_msg dn = {.op = PROTO_OP_DONE, .has_id = true, .id = 7};
    dn.u.done.finish = PROTO_FINISH_CANCELLED;
    dn.u.done.stats = (proto_stats){.prompt_n = 10, .cached_n = 2, .predicted_n = 3,
                                    .prompt_ms = 1.5, .predicted_ms = 20.25, .draft_n = 4,
                                    .draft_accepted_n = 1};
    roundtrip(&dn, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.done.finish, PROTO_FINISH_CANCELLED);
    assert_int_equal(r.u.done.stats.prompt_n, 10);
    assert_int_equal(r.u.done.stats.cached_n, 2);
    assert_int_equal(r.u.done.stats.predicted_n, 3);
    assert_true(r.u.done.stats.predicted_ms == 20.25);
    assert_int_equal(r.u.done.stats.draft_accepted_n, 1);
    proto_msg_free(&r);

    /* err with and without an id; a message with bytes that are not UTF-8 */
    proto_buf b = {0};
    strata_err err;
    assert_int_equal(proto_encode_err(&b, 8, PROTO_ERR_CONTEXT_LENGTH, "too long", &err), 0);
    assert_int_equal(proto_encode_err(&b, -1, PROTO_ERR_BAD_JSON, "bad \xff\xfe byte", &err), 0);
    const char *second = memchr(b.data, '\n', b.len) + 1;
    proto_error pe;
    assert_int_equal(proto_decode(b.data, (size_t)(second - 1 - b.data), PROTO_DIR_TO_SERVER,
                                  &r, &pe), 0);
    assert_true(r.has_id);
    assert_string_equal(r.u.err.code, "context_length");
    proto_msg_free(&r);
    assert_int_equal(proto_decode(second, (size_t)(b.data + b.len - 1 - second),
                                  PROTO_DIR_TO_SERVER, &r, &pe), 0);
    assert_false(r.has_id);
    assert_string_equal(r.u.err.message, "bad ?? byte");
    proto_msg_free(&r);
    proto_buf_free(&b);

    proto_msg pg = {.op = PROTO_OP_PONG, .has_id = true, .id = 12};
    roundtrip(&pg, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.id, 12);
    proto_msg_free(&r);
}

/* The shared pool's fields: done's preempted (sent only when > 0), ready's
 * pool profile, pong's committed bytes; all optional when decoding. */
static void test_kv_pool_fields(void **state)
{
    (void)state;
    proto_msg r;
    char *line;
    proto_msg dn = {.op = PROTO_OP_DONE, .has_id = true, .id = 7};
    dn.u.done.stats = (proto_stats){.prompt_n = 10, .predicted_n = 3, .preempted = 2};
    roundtrip(&dn, PROTO_DIR_TO_SERVER, &r, &line);
    assert_non_null(strstr(line, "\"preempted\":2"));
    assert_int_equal(r.u.done.stats.preempted, 2);
    free(line);
    proto_msg_free(&r);
    dn.u.done.stats.preempted = 0;
    roundtrip(&dn, PROTO_DIR_TO_SERVER, &r, &line);
    assert_null(strstr(line, "preempted"));
    assert_int_equal(r.u.done.stats.preempted, 0);
    free(line);
    proto_msg_free(&r);

    proto_msg rd = {.op = PROTO_OP_READY};
    rd.u.ready = (proto_ready){.protocol = 1, .arch = "llama", .n_ctx_train = 2048,
                               .n_vocab = 512, .n_embd = 64, .n_layer = 5, .slots = 16,
                               .n_ctx = 32768, .n_batch = 256, .kv_type = "f16",
                               .kv_block_tokens = 32, .kv_n_blocks = 256, .kv_bytes = 1 << 20,
                               .kv_max_tokens = 8192, .kv_init_tokens = 512,
                               .kv_step_tokens = 512, .kv_hold_ms = 10000};
    roundtrip(&rd, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.ready.kv_max_tokens, 8192);
    assert_int_equal(r.u.ready.kv_init_tokens, 512);
    assert_int_equal(r.u.ready.kv_step_tokens, 512);
    assert_int_equal(r.u.ready.kv_hold_ms, 10000);
    assert_false(r.u.ready.kv_resident);
    proto_msg_free(&r);
    rd.u.ready.kv_resident = true;
    roundtrip(&rd, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_true(r.u.ready.kv_resident);
    proto_msg_free(&r);
    assert_int_equal(
        decode_str("{\"op\":\"ready\",\"protocol\":1,\"model\":{\"arch\":\"llama\","
                   "\"n_ctx_train\":1,\"n_vocab\":2,\"n_embd\":3},\"slots\":1,\"n_ctx\":8,"
                   "\"kv\":{\"type\":\"f16\",\"resident\":\"yes\"}}",
                   PROTO_DIR_TO_SERVER, &r, &(proto_error){0}),
        STRATA_EFORMAT);

    proto_msg pg = {.op = PROTO_OP_PONG, .has_id = true, .id = 12};
    pg.u.pong = (proto_pong){.has_kv = true, .kv_blocks = 8, .kv_bytes = 4096,
                             .kv_preemptions = 3, .kv_committed_bytes = 1024};
    roundtrip(&pg, PROTO_DIR_TO_SERVER, &r, NULL);
    assert_int_equal(r.u.pong.kv_preemptions, 3);
    assert_int_equal(r.u.pong.kv_committed_bytes, 1024);
    proto_msg_free(&r);
}

static void test_encode_refuses_bad_messages(void **state)
{
    (void)state;
    proto_buf b = {0};
    strata_err err;
    int32_t tok = 1;
    proto_msg m = {.op = PROTO_OP_GEN, .has_id = true, .id = 1,
                   .u.gen = {.tokens = &tok, .n_tokens = 1, .max_tokens = -1,
                             .sampling = proto_sampling_default(), .logprobs = -1}};
    m.u.gen.sampling.top_p = NAN;
    assert_int_equal(proto_encode(&m, &b, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "top_p"));
    m.u.gen.sampling.top_p = 1.0f;
    m.id = PROTO_ID_MAX + 1;
    assert_int_equal(proto_encode(&m, &b, &err), STRATA_EINVAL);
    m.id = 1;
    m.u.gen.n_tokens = 0;
    assert_int_equal(proto_encode(&m, &b, &err), STRATA_EINVAL);
    assert_int_equal(b.len, 0);
    /* a line over the limit: a prompt of 3 million ids of 7 digits */
    size_t n = 3u << 20;
    int32_t *many = malloc(n * sizeof(int32_t));
    assert_non_null(many);
    for (size_t i = 0; i < n; i++) many[i] = 1000000;
    m.u.gen.tokens = many;
    m.u.gen.n_tokens = n;
    assert_int_equal(proto_encode(&m, &b, &err), STRATA_ERANGE);
    assert_int_equal(b.len, 0);
    free(many);
    proto_buf_free(&b);
}

/* Each bad line: the decoder's code, the op it saw, the id it read (-1:
 * none) and a word the message must hold. */
typedef struct bad_case {
    const char *line;
    const char *code;
    int64_t id;
    const char *needle;
} bad_case;

static void test_decode_errors(void **state)
{
    (void)state;
    const bad_case cases[] = {
        {"not json", PROTO_ERR_BAD_JSON, -1, "JSON"},
        {"{\"op\":\"gen\",\"id\":42,\"tokens\":[1,", PROTO_ERR_BAD_JSON, 42, "JSON"},
        {"[1,2]", PROTO_ERR_BAD_JSON, -1, "object"},
        {"{\"id\":4}", PROTO_ERR_UNKNOWN_OP, 4, "no \"op\""},
        {"{\"op\":5,\"id\":4}", PROTO_ERR_UNKNOWN_OP, 4, "string"},
        {"{\"op\":\"frobnicate\",\"id\":9}", PROTO_ERR_UNKNOWN_OP, 9, "frobnicate"},
        {"{\"op\":\"tok\",\"id\":9,\"tokens\":[1]}", PROTO_ERR_UNKNOWN_OP, 9, "tok"},
        {"{\"op\":\"gen\",\"tokens\":[1]}", PROTO_ERR_BAD_REQUEST, -1, "missing id"},
        {"{\"op\":\"gen\",\"id\":-1,\"tokens\":[1]}", PROTO_ERR_BAD_REQUEST, -1, "id must"},
        {"{\"op\":\"gen\",\"id\":1.5,\"tokens\":[1]}", PROTO_ERR_BAD_REQUEST, -1, "id must"},
        {"{\"op\":\"gen\",\"id\":\"7\",\"tokens\":[1]}", PROTO_ERR_BAD_REQUEST, -1, "id must"},
        {"{\"op\":\"gen\",\"id\":9007199254740992,\"tokens\":[1]}", PROTO_ERR_BAD_REQUEST, -1,
         "id must"},
        {"{\"op\":\"gen\",\"id\":1}", PROTO_ERR_BAD_REQUEST, 1, "missing tokens"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[]}", PROTO_ERR_BAD_REQUEST, 1, "tokens is empty"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1,-2]}", PROTO_ERR_BAD_REQUEST, 1, "tokens[1]"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1,2147483648]}", PROTO_ERR_BAD_REQUEST, 1,
         "tokens[1]"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":\"hi\"}", PROTO_ERR_BAD_REQUEST, 1, "array"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"max_tokens\":-2}", PROTO_ERR_BAD_REQUEST, 1,
         "max_tokens"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"top_p\":1.5}}",
         PROTO_ERR_BAD_REQUEST, 1, "sampling.top_p"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"temperature\":\"hot\"}}",
         PROTO_ERR_BAD_REQUEST, 1, "sampling.temperature"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"repeat_penalty\":0}}",
         PROTO_ERR_BAD_REQUEST, 1, "repeat_penalty"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"seed\":-5}}",
         PROTO_ERR_BAD_REQUEST, 1, "sampling.seed"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"temperature\":1e300}}",
         PROTO_ERR_BAD_REQUEST, 1, "temperature"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"logit_bias\":[[1]]}}",
         PROTO_ERR_BAD_REQUEST, 1, "logit_bias[0]"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":{\"logit_bias\":{\"x\":1}}}",
         PROTO_ERR_BAD_REQUEST, 1, "logit_bias"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"sampling\":[]}", PROTO_ERR_BAD_REQUEST, 1,
         "sampling must be an object"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"logprobs\":21}", PROTO_ERR_BAD_REQUEST, 1,
         "logprobs"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"stop_tokens\":[\"a\"]}",
         PROTO_ERR_BAD_REQUEST, 1, "stop_tokens[0]"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"ignore_eos\":1}", PROTO_ERR_BAD_REQUEST, 1,
         "ignore_eos"},
        {"{\"op\":\"gen\",\"id\":1,\"id\":2,\"tokens\":[1]}", PROTO_ERR_BAD_JSON, 1, "duplicate"},
        {"{\"op\":\"gen\",\"id\":1,\"tokens\":[1],\"cache\":0}", PROTO_ERR_BAD_REQUEST, 1,
         "cache must be"},
        {"{\"op\":\"embed\",\"id\":2,\"tokens\":[1],\"cache\":\"no\"}",
         PROTO_ERR_BAD_REQUEST, 2, "cache must be"},
        {"{\"op\":\"embed\",\"id\":2,\"tokens\":[1],\"pooling\":\"max\"}",
         PROTO_ERR_BAD_REQUEST, 2, "pooling"},
        {"{\"op\":\"stop\"}", PROTO_ERR_BAD_REQUEST, -1, "missing id"},
        {"{\"op\":\"ping\",\"id\":null}", PROTO_ERR_BAD_REQUEST, -1, "id must"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_case *c = &cases[i];
        proto_msg m;
        proto_error pe;
        int rc = decode_str(c->line, PROTO_DIR_TO_ENGINE, &m, &pe);
        if (rc != STRATA_EFORMAT) fail_msg("case %zu (%s) decoded", i, c->line);
        if (strcmp(pe.code, c->code) != 0) {
            fail_msg("case %zu (%s): code %s, want %s (%s)", i, c->line, pe.code, c->code,
                     pe.message);
        }
        if (c->id >= 0 && (!pe.has_id || pe.id != c->id)) {
            fail_msg("case %zu (%s): id not read", i, c->line);
        }
        if (c->id < 0 && pe.has_id) fail_msg("case %zu (%s): an id was read", i, c->line);
        if (strstr(pe.message, c->needle) == NULL) {
            fail_msg("case %zu (%s): message \"%s\" lacks \"%s\"", i, c->line, pe.message,
                     c->needle);
        }
        assert_int_equal(m.op, PROTO_OP_NONE); /* nothing to free */
    }
}

static void test_decode_engine_messages_errors(void **state)
{
    (void)state;
    proto_msg m;
    proto_error pe;
    assert_int_equal(decode_str("{\"op\":\"gen\",\"id\":1,\"tokens\":[1]}", PROTO_DIR_TO_SERVER,
                                &m, &pe), STRATA_EFORMAT);
    assert_string_equal(pe.code, PROTO_ERR_UNKNOWN_OP);
    assert_int_equal(decode_str("{\"op\":\"done\",\"id\":1,\"finish\":\"maybe\",\"stats\":{}}",
                                PROTO_DIR_TO_SERVER, &m, &pe), STRATA_EFORMAT);
    assert_non_null(strstr(pe.message, "finish"));
    assert_int_equal(decode_str("{\"op\":\"tok\",\"id\":1,\"tokens\":[1,2],\"logprobs\":[{}]}",
                                PROTO_DIR_TO_SERVER, &m, &pe), STRATA_EFORMAT);
    assert_non_null(strstr(pe.message, "logprobs"));
    assert_int_equal(decode_str("{\"op\":\"err\",\"code\":\"x\",\"message\":\"y\",\"id\":null}",
                                PROTO_DIR_TO_SERVER, &m, &pe), 0);
    assert_false(m.has_id);
    proto_msg_free(&m);
}

/* `pong` carries the scheduler's progress and KV figures (protocol.h):
 * they round-trip exactly, a bare pong still decodes (and says it has no
 * progress), and progress must come whole and sane. */
static void test_pong_progress(void **state)
{
    (void)state;
    proto_msg r;
    char *line;
    proto_msg pg = {.op = PROTO_OP_PONG, .has_id = true, .id = 12};
    pg.u.pong = (proto_pong){.has_progress = true, .steps = 41, .running = true,
                             .step_ms = 812.5, .step_tokens = 512, .ms_per_token = 0.4375,
                             .has_kv = true, .kv_blocks = 64, .kv_used = 17,
                             .kv_bytes = 1048576, .kv_cached = 30, .kv_lookup_tokens = 9000,
                             .kv_hit_tokens = 7040, .kv_preemptions = 2};
    roundtrip(&pg, PROTO_DIR_TO_SERVER, &r, &line);
    assert_string_equal(line, "{\"op\":\"pong\",\"id\":12,\"steps\":41,\"running\":true,"
                              "\"step_ms\":812.5,\"step_tokens\":512,\"ms_per_token\":0.4375,"
                              "\"kv\":{\"blocks\":64,\"used\":17,\"cached\":30,"
                              "\"bytes\":1048576,\"lookup_tokens\":9000,\"hit_tokens\":7040,"
                              "\"preemptions\":2}}");
    assert_int_equal(r.u.pong.kv_cached, 30);
    assert_int_equal(r.u.pong.kv_lookup_tokens, 9000);
    assert_int_equal(r.u.pong.kv_hit_tokens, 7040);
    assert_int_equal(r.u.pong.kv_preemptions, 2);
    assert_true(r.u.pong.has_progress && r.u.pong.has_kv && r.u.pong.running);
    assert_int_equal(r.u.pong.steps, 41);
    assert_true(r.u.pong.step_ms == 812.5);
    assert_int_equal(r.u.pong.step_tokens, 512);
    assert_true(r.u.pong.ms_per_token == 0.4375);
    assert_int_equal(r.u.pong.kv_blocks, 64);
    assert_int_equal(r.u.pong.kv_used, 17);
    assert_int_equal(r.u.pong.kv_bytes, 1048576);
    free(line);
    proto_msg_free(&r);

    proto_msg bare = {.op = PROTO_OP_PONG, .has_id = true, .id = 3};
    roundtrip(&bare, PROTO_DIR_TO_SERVER, &r, &line);
    assert_string_equal(line, "{\"op\":\"pong\",\"id\":3}");
    assert_false(r.u.pong.has_progress);
    assert_false(r.u.pong.has_kv);
    free(line);
    proto_msg_free(&r);

    proto_error pe;
    const char *bad[] = {
        "{\"op\":\"pong\",\"id\":1,\"steps\":4}", /* progress not whole */
        "{\"op\":\"pong\",\"id\":1,\"steps\":4,\"running\":1,\"step_ms\":0,\"step_tokens\":0,"
        "\"ms_per_token\":0}",
        "{\"op\":\"pong\",\"id\":1,\"steps\":4,\"running\":false,\"step_ms\":-1,"
        "\"step_tokens\":0,\"ms_per_token\":0}",
        "{\"op\":\"pong\",\"id\":1,\"steps\":-4,\"running\":false,\"step_ms\":0,"
        "\"step_tokens\":0,\"ms_per_token\":0}",
        "{\"op\":\"pong\",\"id\":1,\"kv\":[1,2,3]}",
        "{\"op\":\"pong\",\"id\":1,\"kv\":{\"blocks\":4}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (decode_str(bad[i], PROTO_DIR_TO_SERVER, &r, &pe) != STRATA_EFORMAT) {
            fail_msg("accepted: %s", bad[i]);
        }
        assert_string_equal(pe.code, PROTO_ERR_BAD_REQUEST);
        assert_true(pe.has_id && pe.id == 1);
    }
    /* an encoder refuses a negative or non-finite figure */
    proto_buf b = {0};
    strata_err err;
    pg.u.pong.step_ms = NAN;
    assert_int_equal(proto_encode(&pg, &b, &err), STRATA_EINVAL);
    pg.u.pong.step_ms = 1.0;
    pg.u.pong.kv_used = -1;
    assert_int_equal(proto_encode(&pg, &b, &err), STRATA_EINVAL);
    assert_int_equal(b.len, 0);
    proto_buf_free(&b);
}

static void test_peek_id(void **state)
{
    (void)state;
    int64_t id;
    const char *a = "{\"op\":\"gen\", \"id\" : 123,\"tokens\":[1,2";
    assert_true(proto_peek_id(a, strlen(a), &id));
    assert_int_equal(id, 123);
    const char *b = "{\"op\":\"id\",\"id\":5}";
    assert_true(proto_peek_id(b, strlen(b), &id));
    assert_int_equal(id, 5);
    /* cut inside the number: not trusted */
    assert_false(proto_peek_id(a, strlen("{\"op\":\"gen\", \"id\" : 12"), &id));
    const char *c = "{\"id\":1.5}";
    assert_false(proto_peek_id(c, strlen(c), &id));
    const char *d = "{\"id\":99999999999999999999}";
    assert_false(proto_peek_id(d, strlen(d), &id));
}

/* Reads all lines of input fed in pieces of `step` bytes (0: one fill per
 * byte through a pipe is too slow; feed is used) into out, joined by '|',
 * with "<LONG:id>" for an oversized line. */
static void read_all(const char *input, size_t n, size_t step, size_t max_line, char *out,
                     size_t out_size)
{
    proto_reader r;
    proto_reader_init(&r, max_line);
    out[0] = '\0';
    size_t fed = 0;
    for (;;) {
        const char *line;
        size_t len;
        int k = proto_reader_next(&r, &line, &len);
        if (k == PROTO_READ_EOF) break;
        if (k == PROTO_READ_NEED_MORE) {
            if (fed == n) {
                proto_reader_set_eof(&r);
                continue;
            }
            size_t take = n - fed < step ? n - fed : step;
            assert_int_equal(proto_reader_feed(&r, input + fed, take), 0);
            fed += take;
            continue;
        }
        char piece[128];
        if (k == PROTO_READ_TOO_LONG) {
            int64_t id = -1;
            proto_peek_id(line, len, &id);
            snprintf(piece, sizeof(piece), "<LONG:%lld>|", (long long)id);
        } else {
            snprintf(piece, sizeof(piece), "%.*s|", (int)len, line);
        }
        strncat(out, piece, out_size - strlen(out) - 1);
        /* bounded memory: never more than a line plus one feed */
        assert_true(r.len - r.start <= max_line + step);
    }
    proto_reader_free(&r);
}

static void test_reader_every_split(void **state)
{
    (void)state;
    const char input[] = "{\"a\":1}\n\r\n\n{\"op\":\"gen\",\"id\":31,\"tokens\":[1,2,3,4,5,6,7,8]}"
                         "\nshort\r\n{\"b\":2}\n{\"op\":\"ping\",\"id\":7,\"xxxxxxxxxxxxxxxxxxxxxxxxxxx\"}\n"
                         "tail";
    const char *want = "{\"a\":1}|<LONG:31>|short|{\"b\":2}|<LONG:7>|tail|";
    char got[512];
    for (size_t step = 1; step <= sizeof(input); step++) {
        read_all(input, sizeof(input) - 1, step, 40, got, sizeof(got));
        if (strcmp(got, want) != 0) fail_msg("step %zu: got %s", step, got);
    }
    /* a line of exactly max_line bytes is fine */
    read_all("0123456789\n", 11, 3, 10, got, sizeof(got));
    assert_string_equal(got, "0123456789|");
    read_all("0123456789A\nok\n", 15, 4, 10, got, sizeof(got));
    assert_string_equal(got, "<LONG:-1>|ok|");
}

static void test_reader_fd(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    /* an oversized line bigger than the pipe buffer is written by a child */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        const char *head = "{\"op\":\"gen\",\"id\":55,\"tokens\":[";
        if (write(fds[1], head, strlen(head)) < 0) _exit(1);
        char chunk[4096];
        memset(chunk, '1', sizeof(chunk));
        for (int i = 0; i < 64; i++) {
            if (write(fds[1], chunk, sizeof(chunk)) < 0) _exit(1);
        }
        const char *rest = "]}\n{\"op\":\"ping\",\"id\":1}\n";
        if (write(fds[1], rest, strlen(rest)) < 0) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    proto_reader r;
    proto_reader_init(&r, 10000);
    int n_long = 0, n_lines = 0;
    strata_err err;
    for (;;) {
        const char *line;
        size_t len;
        int k = proto_reader_next(&r, &line, &len);
        if (k == PROTO_READ_EOF) break;
        if (k == PROTO_READ_NEED_MORE) {
            assert_true(proto_reader_fill(&r, fds[0], &err) >= 0);
            assert_true(r.cap <= 262144); /* bounded: not the 256 KiB line */
            continue;
        }
        if (k == PROTO_READ_TOO_LONG) {
            int64_t id;
            assert_true(proto_peek_id(line, len, &id));
            assert_int_equal(id, 55);
            n_long++;
        } else {
            assert_int_equal(len, strlen("{\"op\":\"ping\",\"id\":1}"));
            n_lines++;
        }
    }
    assert_int_equal(n_long, 1);
    assert_int_equal(n_lines, 1);
    proto_reader_free(&r);
    close(fds[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gen_roundtrip),
        cmocka_unit_test(test_gen_defaults),
        cmocka_unit_test(test_other_messages_roundtrip),
        cmocka_unit_test(test_kv_pool_fields),
        cmocka_unit_test(test_encode_refuses_bad_messages),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_decode_engine_messages_errors),
        cmocka_unit_test(test_pong_progress),
        cmocka_unit_test(test_peek_id),
        cmocka_unit_test(test_reader_every_split),
        cmocka_unit_test(test_reader_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
