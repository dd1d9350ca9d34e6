/* The engine protocol codec: messages to and from one line of JSON (with
 * jansson), and the line reader. protocol.h is the reference for the wire
 * format; this file follows it field by field.
 *
 * Decoding checks every field's type and range and fails with a message of
 * the form "gen: sampling.top_p must be a number in [0, 1]" so that the
 * engine's `err` tells the server's author exactly what to fix. Encoding
 * checks the same rules, so a line this codec writes always decodes. */
#include "engine/protocol.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- names ---- */

static const char *const k_op_names[] = {
    [PROTO_OP_NONE] = "?",       [PROTO_OP_GEN] = "gen",   [PROTO_OP_EMBED] = "embed",
    [PROTO_OP_STOP] = "stop",    [PROTO_OP_PING] = "ping", [PROTO_OP_SHUTDOWN] = "shutdown",
    [PROTO_OP_READY] = "ready",  [PROTO_OP_TOK] = "tok",   [PROTO_OP_EMB] = "emb",
    [PROTO_OP_DONE] = "done",    [PROTO_OP_ERR] = "err",   [PROTO_OP_PONG] = "pong",
    [PROTO_OP_PLP] = "plp",      [PROTO_OP_PROG] = "prog",
};

const char *proto_op_name(proto_op op)
{
    if ((int)op < 0 || (size_t)op >= sizeof(k_op_names) / sizeof(k_op_names[0])) return "?";
    return k_op_names[op];
}

const char *proto_finish_name(proto_finish f)
{
    switch (f) {
    case PROTO_FINISH_STOP: return "stop";
    case PROTO_FINISH_LENGTH: return "length";
    case PROTO_FINISH_CANCELLED: return "cancelled";
    }
    return "?";
}

const char *proto_pooling_name(proto_pooling p)
{
    switch (p) {
    case PROTO_POOLING_MEAN: return "mean";
    case PROTO_POOLING_CLS: return "cls";
    case PROTO_POOLING_LAST: return "last";
    case PROTO_POOLING_DEFAULT: break;
    }
    return NULL;
}

proto_sampling proto_sampling_default(void)
{
    return (proto_sampling){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f,
        .repeat_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .penalty_last_n = 64, .xtc_threshold = 0.1f, .dynatemp_exponent = 1.0f,
        .mirostat_tau = 5.0f, .mirostat_eta = 0.1f, .dry_base = 1.75f, .dry_allowed_length = 2,
        .dry_penalty_last_n = 64, .dry_breakers = {"\n", ":", "\"", "*"}, .n_dry_breakers = 4,
    };
}

void proto_msg_free(proto_msg *m)
{
    if (m == NULL) return;
    switch (m->op) {
    case PROTO_OP_GEN:
        free(m->u.gen.tokens);
        free(m->u.gen.sampling.logit_bias);
        free(m->u.gen.stop_tokens);
        free(m->u.gen.min_bans);
        free(m->u.gen.allowed_tokens);
        free(m->u.gen.bad_ids);
        free(m->u.gen.bad_len);
        free(m->u.gen.grammar);
        break;
    case PROTO_OP_EMBED: free(m->u.embed.tokens); break;
    case PROTO_OP_READY:
        free((void *)m->u.ready.arch);
        free((void *)m->u.ready.kv_type);
        free((void *)m->u.ready.draft_source);
        break;
    case PROTO_OP_TOK:
        if (m->u.tok.logprobs != NULL) {
            for (size_t i = 0; i < m->u.tok.n_tokens; i++) free(m->u.tok.logprobs[i].top);
        }
        free(m->u.tok.logprobs);
        free(m->u.tok.tokens);
        break;
    case PROTO_OP_PLP:
        if (m->u.plp.logprobs != NULL) {
            for (size_t i = 0; i < m->u.plp.n; i++) free(m->u.plp.logprobs[i].top);
        }
        free(m->u.plp.logprobs);
        break;
    case PROTO_OP_EMB: free(m->u.emb.vector); break;
    case PROTO_OP_ERR:
        free((void *)m->u.err.code);
        free((void *)m->u.err.message);
        break;
    default: break;
    }
    memset(m, 0, sizeof(*m));
}

/* ==== Encoding ==== */

void proto_buf_free(proto_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static int buf_reserve(proto_buf *b, size_t extra)
{
    if (b->cap - b->len >= extra) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > SIZE_MAX / 2) return -1;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (p == NULL) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

/* Building a JSON value can fail only for lack of memory (or a string that
 * is not UTF-8, see enc_string); each builder below returns NULL then and
 * the encoder reports ENOMEM. */
typedef struct enc {
    bool oom;
    const char *bad; /* the first rule broken, for the message */
} enc;

static json_t *enc_take(enc *e, json_t *v)
{
    if (v == NULL) e->oom = true;
    return v;
}

static void enc_set(enc *e, json_t *obj, const char *key, json_t *v)
{
    if (v == NULL || obj == NULL || json_object_set_new(obj, key, v) != 0) e->oom = true;
}

static json_t *enc_int(enc *e, int64_t v)
{
    return enc_take(e, json_integer((json_int_t)v));
}

static json_t *enc_real(enc *e, double v, const char *what)
{
    if (!isfinite(v)) {
        if (e->bad == NULL) e->bad = what;
        return enc_take(e, json_integer(0));
    }
    return enc_take(e, json_real(v));
}

/* A string for the wire; bytes that are not valid UTF-8 become '?' so that
 * a message quoting the input can always be written. */
static json_t *enc_string(enc *e, const char *s)
{
    if (s == NULL) s = "";
    json_t *v = json_string(s);
    if (v != NULL) return v;
    size_t n = strlen(s);
    char *copy = malloc(n + 1);
    if (copy == NULL) return enc_take(e, NULL);
    for (size_t i = 0; i < n; i++) copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    copy[n] = '\0';
    v = json_string(copy);
    free(copy);
    return enc_take(e, v);
}

static json_t *enc_tokens(enc *e, const int32_t *ids, size_t n, const char *what)
{
    json_t *a = enc_take(e, json_array());
    if (a == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 && e->bad == NULL) e->bad = what;
        if (json_array_append_new(a, json_integer(ids[i])) != 0) {
            e->oom = true;
            break;
        }
    }
    return a;
}

static void enc_gen(enc *e, json_t *o, const proto_gen *g)
{
    if (g->n_tokens == 0 || g->tokens == NULL) e->bad = "gen.tokens (none)";
    enc_set(e, o, "tokens", enc_tokens(e, g->tokens, g->n_tokens, "gen.tokens"));
    if (g->max_tokens < -1) e->bad = "gen.max_tokens";
    enc_set(e, o, "max_tokens", enc_int(e, g->max_tokens));
    const proto_sampling *s = &g->sampling;
    json_t *so = enc_take(e, json_object());
    enc_set(e, so, "temperature", enc_real(e, s->temperature, "sampling.temperature"));
    enc_set(e, so, "top_k", enc_int(e, s->top_k));
    enc_set(e, so, "top_p", enc_real(e, s->top_p, "sampling.top_p"));
    enc_set(e, so, "min_p", enc_real(e, s->min_p, "sampling.min_p"));
    enc_set(e, so, "typical_p", enc_real(e, s->typical_p, "sampling.typical_p"));
    enc_set(e, so, "repeat_penalty", enc_real(e, s->repeat_penalty, "sampling.repeat_penalty"));
    enc_set(e, so, "presence_penalty",
            enc_real(e, s->presence_penalty, "sampling.presence_penalty"));
    enc_set(e, so, "frequency_penalty",
            enc_real(e, s->frequency_penalty, "sampling.frequency_penalty"));
    enc_set(e, so, "penalty_last_n", enc_int(e, s->penalty_last_n));
    /* llama.cpp's further samplers, written when on */
    if (s->top_n_sigma > 0) enc_set(e, so, "top_n_sigma", enc_real(e, s->top_n_sigma, "sampling.top_n_sigma"));
    if (s->xtc_probability > 0) {
        enc_set(e, so, "xtc_probability", enc_real(e, s->xtc_probability, "sampling.xtc_probability"));
        enc_set(e, so, "xtc_threshold", enc_real(e, s->xtc_threshold, "sampling.xtc_threshold"));
    }
    if (s->mirostat != 0) {
        enc_set(e, so, "mirostat", enc_int(e, s->mirostat));
        enc_set(e, so, "mirostat_tau", enc_real(e, s->mirostat_tau, "sampling.mirostat_tau"));
        enc_set(e, so, "mirostat_eta", enc_real(e, s->mirostat_eta, "sampling.mirostat_eta"));
    }
    if (s->dry_multiplier != 0) {
        enc_set(e, so, "dry_multiplier", enc_real(e, s->dry_multiplier, "sampling.dry_multiplier"));
        enc_set(e, so, "dry_base", enc_real(e, s->dry_base, "sampling.dry_base"));
        enc_set(e, so, "dry_allowed_length", enc_int(e, s->dry_allowed_length));
        enc_set(e, so, "dry_penalty_last_n", enc_int(e, s->dry_penalty_last_n));
        json_t *a = enc_take(e, json_array());
        for (size_t i = 0; i < s->n_dry_breakers && i < PROTO_MAX_DRY_BREAKERS && a != NULL; i++) {
            json_array_append_new(a, json_string(s->dry_breakers[i]));
        }
        enc_set(e, so, "dry_sequence_breakers", a);
    }
    if (s->dynatemp_range > 0) {
        enc_set(e, so, "dynatemp_range", enc_real(e, s->dynatemp_range, "sampling.dynatemp_range"));
        enc_set(e, so, "dynatemp_exponent", enc_real(e, s->dynatemp_exponent, "sampling.dynatemp_exponent"));
    }
    if (s->has_seed) {
        if (s->seed > (uint64_t)INT64_MAX) e->bad = "sampling.seed";
        enc_set(e, so, "seed", enc_int(e, (int64_t)(s->seed & (uint64_t)INT64_MAX)));
    }
    if (s->n_logit_bias > 0) {
        json_t *a = enc_take(e, json_array());
        for (size_t i = 0; i < s->n_logit_bias && a != NULL; i++) {
            const proto_bias *b = &s->logit_bias[i];
            if (b->token < 0) e->bad = "sampling.logit_bias token";
            json_t *bias = (isinf(b->bias) && b->bias < 0)
                               ? enc_take(e, json_false())
                               : enc_real(e, b->bias, "sampling.logit_bias bias");
            json_t *pair = enc_take(e, json_array());
            if (pair != NULL) {
                if (json_array_append_new(pair, json_integer(b->token)) != 0) e->oom = true;
                if (bias == NULL || json_array_append_new(pair, bias) != 0) e->oom = true;
                if (json_array_append_new(a, pair) != 0) e->oom = true;
            } else {
                json_decref(bias);
            }
        }
        enc_set(e, so, "logit_bias", a);
    }
    enc_set(e, o, "sampling", so);
    if (g->n_stop_tokens > 0) {
        enc_set(e, o, "stop_tokens",
                enc_tokens(e, g->stop_tokens, g->n_stop_tokens, "gen.stop_tokens"));
    }
    if (g->n_min_bans > 0) {
        enc_set(e, o, "min_bans",
                enc_tokens(e, g->min_bans, g->n_min_bans, "gen.min_bans"));
    }
    if (g->ignore_eos) enc_set(e, o, "ignore_eos", enc_take(e, json_true()));
    if (g->n_allowed_tokens > 0) {
        enc_set(e, o, "allowed_tokens",
                enc_tokens(e, g->allowed_tokens, g->n_allowed_tokens, "gen.allowed_tokens"));
    }
    if (g->n_bad > 0) {
        json_t *a = enc_take(e, json_array());
        size_t at = 0;
        for (size_t i = 0; i < g->n_bad && a != NULL; i++) {
            if (g->bad_len[i] < 1) e->bad = "gen.bad_words";
            json_array_append_new(a, enc_tokens(e, g->bad_ids + at, (size_t)g->bad_len[i], "gen.bad_words"));
            at += (size_t)(g->bad_len[i] > 0 ? g->bad_len[i] : 0);
        }
        enc_set(e, o, "bad_words", a);
    }
    if (g->min_tokens < 0) e->bad = "gen.min_tokens";
    if (g->min_tokens > 0) enc_set(e, o, "min_tokens", enc_int(e, g->min_tokens));
    if (g->logprobs > PROTO_MAX_LOGPROBS || g->logprobs < -1) e->bad = "gen.logprobs";
    if (g->logprobs == 0) enc_set(e, o, "logprobs", enc_take(e, json_true()));
    if (g->logprobs > 0) enc_set(e, o, "logprobs", enc_int(e, g->logprobs));
    if (g->prompt_top > PROTO_MAX_LOGPROBS || g->prompt_top < 0) e->bad = "gen.prompt_top";
    if (g->prompt_logprobs && g->prompt_top == 0) {
        enc_set(e, o, "prompt_logprobs", enc_take(e, json_true()));
    }
    if (g->prompt_logprobs && g->prompt_top > 0) {
        enc_set(e, o, "prompt_logprobs", enc_int(e, g->prompt_top));
    }
    if (g->no_cache) enc_set(e, o, "cache", enc_take(e, json_false()));
    if (g->progress) enc_set(e, o, "progress", enc_take(e, json_true()));
    if (g->grammar != NULL) enc_set(e, o, "grammar", enc_take(e, json_string(g->grammar)));
    if (g->no_speculative) enc_set(e, o, "speculative", enc_take(e, json_false()));
    if (g->has_draft_max) enc_set(e, o, "draft_max", enc_int(e, g->draft_max));
}

/* lps[0..n) as `logprobs` entries ({"token","logprob"[,"rank"][,"top"]}). */
static json_t *enc_logprobs(enc *e, const proto_logprob *lps, size_t n, const char *what)
{
    json_t *a = enc_take(e, json_array());
    for (size_t i = 0; i < n && a != NULL; i++) {
        const proto_logprob *lp = &lps[i];
        json_t *entry = enc_take(e, json_object());
        enc_set(e, entry, "token", enc_int(e, lp->token));
        enc_set(e, entry, "logprob", enc_real(e, lp->logprob, what));
        if (lp->rank < 0) e->bad = what;
        if (lp->rank > 0) enc_set(e, entry, "rank", enc_int(e, lp->rank));
        if (lp->n_top > 0) {
            json_t *top = enc_take(e, json_array());
            for (size_t j = 0; j < lp->n_top && top != NULL; j++) {
                json_t *pair = enc_take(e, json_array());
                if (pair == NULL) break;
                if (json_array_append_new(pair, json_integer(lp->top[j].token)) != 0 ||
                    json_array_append_new(pair, enc_real(e, lp->top[j].logprob, what)) != 0 ||
                    json_array_append_new(top, pair) != 0) {
                    e->oom = true;
                }
            }
            enc_set(e, entry, "top", top);
        }
        if (entry == NULL || json_array_append_new(a, entry) != 0) e->oom = true;
    }
    return a;
}

static void enc_tok(enc *e, json_t *o, const proto_tok *t)
{
    if (t->n_tokens == 0 || t->tokens == NULL) e->bad = "tok.tokens (none)";
    enc_set(e, o, "tokens", enc_tokens(e, t->tokens, t->n_tokens, "tok.tokens"));
    if (t->logprobs == NULL) return;
    enc_set(e, o, "logprobs", enc_logprobs(e, t->logprobs, t->n_tokens, "tok.logprobs"));
}

static void enc_plp(enc *e, json_t *o, const proto_plp *p)
{
    if (p->n == 0 || p->logprobs == NULL) e->bad = "plp.logprobs (none)";
    if (p->from < 1 || p->from > INT32_MAX) e->bad = "plp.from";
    enc_set(e, o, "from", enc_int(e, p->from));
    enc_set(e, o, "logprobs", enc_logprobs(e, p->logprobs, p->n, "plp.logprobs"));
}

static void enc_ready(enc *e, json_t *o, const proto_ready *r)
{
    enc_set(e, o, "protocol", enc_int(e, r->protocol));
    json_t *mo = enc_take(e, json_object());
    enc_set(e, mo, "arch", enc_string(e, r->arch));
    enc_set(e, mo, "n_ctx_train", enc_int(e, r->n_ctx_train));
    enc_set(e, mo, "n_vocab", enc_int(e, r->n_vocab));
    enc_set(e, mo, "n_embd", enc_int(e, r->n_embd));
    enc_set(e, mo, "n_layer", enc_int(e, r->n_layer));
    enc_set(e, o, "model", mo);
    enc_set(e, o, "slots", enc_int(e, r->slots));
    enc_set(e, o, "n_ctx", enc_int(e, r->n_ctx));
    enc_set(e, o, "n_batch", enc_int(e, r->n_batch));
    json_t *kv = enc_take(e, json_object());
    enc_set(e, kv, "type", enc_string(e, r->kv_type));
    enc_set(e, kv, "block_tokens", enc_int(e, r->kv_block_tokens));
    enc_set(e, kv, "n_blocks", enc_int(e, r->kv_n_blocks));
    enc_set(e, kv, "bytes", enc_int(e, r->kv_bytes));
    if (r->kv_cache_blocks < 0 || r->kv_cache_bytes < 0 || r->kv_cache_min_tokens < 0) {
        e->bad = "ready.kv cache figures";
    }
    enc_set(e, kv, "prefix_cache", enc_take(e, json_boolean(r->kv_prefix_cache)));
    enc_set(e, kv, "cache_blocks", enc_int(e, r->kv_cache_blocks));
    enc_set(e, kv, "cache_bytes", enc_int(e, r->kv_cache_bytes));
    enc_set(e, kv, "cache_min_tokens", enc_int(e, r->kv_cache_min_tokens));
    if (r->kv_max_tokens > 0) { /* the pool's memory profile */
        if (r->kv_init_tokens < 0 || r->kv_step_tokens < 0 || r->kv_hold_ms < 0) {
            e->bad = "ready.kv pool figures";
        }
        enc_set(e, kv, "max_tokens", enc_int(e, r->kv_max_tokens));
        enc_set(e, kv, "init_tokens", enc_int(e, r->kv_init_tokens));
        enc_set(e, kv, "step_tokens", enc_int(e, r->kv_step_tokens));
        enc_set(e, kv, "hold_ms", enc_int(e, r->kv_hold_ms));
        enc_set(e, kv, "resident", enc_take(e, json_boolean(r->kv_resident)));
    }
    enc_set(e, o, "kv", kv);
    if (r->draft_source != NULL) {
        json_t *dr = enc_take(e, json_object());
        enc_set(e, dr, "source", enc_string(e, r->draft_source));
        enc_set(e, dr, "max", enc_int(e, r->draft_max));
        enc_set(e, dr, "min", enc_int(e, r->draft_min));
        enc_set(e, dr, "p_min", enc_real(e, r->draft_p_min, "ready.draft.p_min"));
        enc_set(e, o, "draft", dr);
    }
}

static void enc_done(enc *e, json_t *o, const proto_done *d)
{
    enc_set(e, o, "finish", enc_string(e, proto_finish_name(d->finish)));
    const proto_stats *s = &d->stats;
    json_t *so = enc_take(e, json_object());
    enc_set(e, so, "prompt_n", enc_int(e, s->prompt_n));
    enc_set(e, so, "cached_n", enc_int(e, s->cached_n));
    enc_set(e, so, "predicted_n", enc_int(e, s->predicted_n));
    enc_set(e, so, "prompt_ms", enc_real(e, s->prompt_ms, "stats.prompt_ms"));
    enc_set(e, so, "predicted_ms", enc_real(e, s->predicted_ms, "stats.predicted_ms"));
    enc_set(e, so, "draft_n", enc_int(e, s->draft_n));
    enc_set(e, so, "draft_accepted_n", enc_int(e, s->draft_accepted_n));
    if (s->preempted > 0) enc_set(e, so, "preempted", enc_int(e, s->preempted));
    enc_set(e, o, "stats", so);
}

static void enc_pong(enc *e, json_t *o, const proto_pong *pg)
{
    if (pg->has_progress) {
        if (pg->steps < 0 || pg->step_tokens < 0) e->bad = "pong.steps or step_tokens";
        if (!(pg->step_ms >= 0) || !(pg->ms_per_token >= 0)) e->bad = "pong.step_ms or ms_per_token";
        enc_set(e, o, "steps", enc_int(e, pg->steps));
        enc_set(e, o, "running", enc_take(e, json_boolean(pg->running)));
        enc_set(e, o, "step_ms", enc_real(e, pg->step_ms, "pong.step_ms"));
        enc_set(e, o, "step_tokens", enc_int(e, pg->step_tokens));
        enc_set(e, o, "ms_per_token", enc_real(e, pg->ms_per_token, "pong.ms_per_token"));
    }
    if (pg->has_kv) {
        if (pg->kv_blocks < 0 || pg->kv_used < 0 || pg->kv_bytes < 0 || pg->kv_cached < 0 ||
            pg->kv_lookup_tokens < 0 || pg->kv_hit_tokens < 0 || pg->kv_preemptions < 0) {
            e->bad = "pong.kv";
        }
        json_t *kv = enc_take(e, json_object());
        enc_set(e, kv, "blocks", enc_int(e, pg->kv_blocks));
        enc_set(e, kv, "used", enc_int(e, pg->kv_used));
        enc_set(e, kv, "cached", enc_int(e, pg->kv_cached));
        enc_set(e, kv, "bytes", enc_int(e, pg->kv_bytes));
        enc_set(e, kv, "lookup_tokens", enc_int(e, pg->kv_lookup_tokens));
        enc_set(e, kv, "hit_tokens", enc_int(e, pg->kv_hit_tokens));
        enc_set(e, kv, "preemptions", enc_int(e, pg->kv_preemptions));
        if (pg->kv_committed_bytes > 0) {
            enc_set(e, kv, "committed_bytes", enc_int(e, pg->kv_committed_bytes));
        }
        enc_set(e, o, "kv", kv);
    }
}

static bool op_has_id(proto_op op)
{
    return op != PROTO_OP_SHUTDOWN && op != PROTO_OP_READY && op != PROTO_OP_NONE;
}

typedef struct dump_ctx {
    proto_buf *out;
    size_t limit; /* the line may not grow past this length of out */
    bool too_long;
    bool oom;
} dump_ctx;

static int dump_cb(const char *buffer, size_t size, void *data)
{
    dump_ctx *d = data;
    if (size > d->limit - d->out->len) {
        d->too_long = true;
        return -1;
    }
    if (buf_reserve(d->out, size) != 0) {
        d->oom = true;
        return -1;
    }
    memcpy(d->out->data + d->out->len, buffer, size);
    d->out->len += size;
    return 0;
}

int proto_encode(const proto_msg *m, proto_buf *out, strata_err *err)
{
    enc e = {0};
    json_t *o = enc_take(&e, json_object());
    if (m->op == PROTO_OP_NONE || (size_t)m->op >= sizeof(k_op_names) / sizeof(k_op_names[0])) {
        json_decref(o);
        return strata_err_set(err, STRATA_EINVAL, "encode: no such op (%d)", (int)m->op);
    }
    enc_set(&e, o, "op", enc_string(&e, proto_op_name(m->op)));
    bool need_id = op_has_id(m->op) && m->op != PROTO_OP_ERR;
    if (need_id || (m->op == PROTO_OP_ERR && m->has_id)) {
        if ((!m->has_id && need_id) || m->id < 0 || m->id > PROTO_ID_MAX) e.bad = "id";
        enc_set(&e, o, "id", enc_int(&e, m->id));
    }
    switch (m->op) {
    case PROTO_OP_GEN: enc_gen(&e, o, &m->u.gen); break;
    case PROTO_OP_EMBED:
        if (m->u.embed.n_tokens == 0 || m->u.embed.tokens == NULL) e.bad = "embed.tokens (none)";
        enc_set(&e, o, "tokens",
                enc_tokens(&e, m->u.embed.tokens, m->u.embed.n_tokens, "embed.tokens"));
        if (m->u.embed.pooling != PROTO_POOLING_DEFAULT) {
            const char *name = proto_pooling_name(m->u.embed.pooling);
            if (name == NULL) e.bad = "embed.pooling";
            enc_set(&e, o, "pooling", enc_string(&e, name ? name : "?"));
        }
        if (m->u.embed.no_cache) enc_set(&e, o, "cache", enc_take(&e, json_false()));
        break;
    case PROTO_OP_READY: enc_ready(&e, o, &m->u.ready); break;
    case PROTO_OP_TOK: enc_tok(&e, o, &m->u.tok); break;
    case PROTO_OP_PLP: enc_plp(&e, o, &m->u.plp); break;
    case PROTO_OP_PROG: {
        const proto_prog *pg = &m->u.prog;
        if (pg->processed < 0 || pg->total < 1 || pg->processed > pg->total || pg->cached < 0 ||
            pg->cached > pg->total) {
            e.bad = "prog";
        }
        enc_set(&e, o, "processed", enc_int(&e, pg->processed));
        enc_set(&e, o, "total", enc_int(&e, pg->total));
        enc_set(&e, o, "cached", enc_int(&e, pg->cached));
        enc_set(&e, o, "ms", enc_real(&e, pg->ms, "prog.ms"));
        break;
    }
    case PROTO_OP_EMB: {
        json_t *a = enc_take(&e, json_array());
        for (size_t i = 0; i < m->u.emb.n && a != NULL; i++) {
            if (json_array_append_new(a, enc_real(&e, m->u.emb.vector[i], "emb.vector")) != 0) {
                e.oom = true;
            }
        }
        enc_set(&e, o, "vector", a);
        break;
    }
    case PROTO_OP_DONE: enc_done(&e, o, &m->u.done); break;
    case PROTO_OP_ERR:
        enc_set(&e, o, "code", enc_string(&e, m->u.err.code));
        enc_set(&e, o, "message", enc_string(&e, m->u.err.message));
        break;
    case PROTO_OP_PONG: enc_pong(&e, o, &m->u.pong); break;
    default: break; /* stop, ping, shutdown: no more fields */
    }
    if (e.oom || e.bad != NULL) {
        json_decref(o);
        if (e.oom) return strata_err_set(err, STRATA_ENOMEM, "encode %s: out of memory",
                                         proto_op_name(m->op));
        return strata_err_set(err, STRATA_EINVAL, "encode %s: invalid %s", proto_op_name(m->op),
                              e.bad);
    }
    size_t start = out->len;
    dump_ctx d = {.out = out, .limit = start + PROTOCOL_MAX_LINE};
    int rc = json_dump_callback(o, dump_cb, &d, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (rc == 0 && buf_reserve(out, 1) != 0) {
        rc = -1;
        d.oom = true;
    }
    if (rc != 0) {
        out->len = start;
        if (d.too_long) {
            return strata_err_set(err, STRATA_ERANGE,
                                  "encode %s: the line would be longer than %zu bytes",
                                  proto_op_name(m->op), PROTOCOL_MAX_LINE);
        }
        return strata_err_set(err, STRATA_ENOMEM, "encode %s: out of memory",
                              proto_op_name(m->op));
    }
    out->data[out->len++] = '\n';
    return 0;
}

int proto_encode_err(proto_buf *out, int64_t id, const char *code, const char *message,
                     strata_err *err)
{
    proto_msg m = {.op = PROTO_OP_ERR, .has_id = id >= 0, .id = id < 0 ? 0 : id,
                   .u.err = {.code = code, .message = message}};
    return proto_encode(&m, out, err);
}

/* ==== Decoding ==== */

typedef struct dec {
    proto_error *perr;
    const char *op; /* the op's name, the prefix of every message */
    bool failed;
} dec;

static void dec_fail(dec *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void dec_fail(dec *d, const char *fmt, ...)
{
    if (d->failed) return;
    d->failed = true;
    d->perr->code = PROTO_ERR_BAD_REQUEST;
    int n = snprintf(d->perr->message, sizeof(d->perr->message), "%s: ", d->op);
    if (n < 0 || (size_t)n >= sizeof(d->perr->message)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->perr->message + n, sizeof(d->perr->message) - (size_t)n, fmt, ap);
    va_end(ap);
}

/* An integer field in [lo, hi]. Absent (or null when null_ok): *present is
 * false and *out untouched. */
static void dec_int(dec *d, json_t *obj, const char *key, const char *path, bool required,
                    int64_t lo, int64_t hi, int64_t *out, bool *present)
{
    if (present) *present = false;
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) {
        if (required) dec_fail(d, "missing %s", path);
        return;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        dec_fail(d, "%s must be an integer in [%lld, %lld]", path, (long long)lo, (long long)hi);
        return;
    }
    *out = json_integer_value(v);
    if (present) *present = true;
}

static void dec_i32(dec *d, json_t *obj, const char *key, const char *path, int32_t lo,
                    int32_t hi, int32_t *out)
{
    int64_t v = 0;
    bool present = false;
    dec_int(d, obj, key, path, false, lo, hi, &v, &present);
    if (present) *out = (int32_t)v;
}

/* A number (integer or real) that is a finite float in [lo, hi]. */
static bool dec_float_value(json_t *v, double lo, double hi, float *out)
{
    if (!json_is_number(v)) return false;
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi || fabs(x) > FLT_MAX) return false;
    *out = (float)x;
    return true;
}

static void dec_float(dec *d, json_t *obj, const char *key, const char *path, double lo,
                      double hi, float *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v)) return;
    if (!dec_float_value(v, lo, hi, out)) {
        if (lo == -FLT_MAX && hi == FLT_MAX) dec_fail(d, "%s must be a number", path);
        else dec_fail(d, "%s must be a number in [%g, %g]", path, lo, hi);
    }
}

static void dec_double(dec *d, json_t *obj, const char *key, const char *path, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL) {
        dec_fail(d, "missing %s", path);
        return;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        dec_fail(d, "%s must be a number", path);
        return;
    }
    *out = json_number_value(v);
}

/* An array of token ids; *out is malloc'd (NULL when empty). */
static void dec_tokens(dec *d, json_t *obj, const char *key, bool required, bool nonempty,
                       int32_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    json_t *a = json_object_get(obj, key);
    if (a == NULL || json_is_null(a)) {
        if (required) dec_fail(d, "missing %s", key);
        return;
    }
    if (!json_is_array(a)) {
        dec_fail(d, "%s must be an array of token ids", key);
        return;
    }
    size_t n = json_array_size(a);
    if (n == 0) {
        if (nonempty) dec_fail(d, "%s is empty", key);
        return;
    }
    int32_t *ids = malloc(n * sizeof(int32_t));
    if (ids == NULL) {
        dec_fail(d, "%s: out of memory for %zu tokens", key, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX) {
            dec_fail(d, "%s[%zu] must be a token id (an integer in [0, 2147483647])", key, i);
            free(ids);
            return;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    *out = ids;
    *n_out = n;
}

/* A logit_bias entry's bias: a number, or false for a ban. */
static bool dec_bias_value(json_t *v, float *out)
{
    if (json_is_false(v)) {
        *out = -INFINITY;
        return true;
    }
    return dec_float_value(v, -FLT_MAX, FLT_MAX, out);
}

static bool parse_token_key(const char *key, int32_t *out)
{
    if (*key < '0' || *key > '9') return false;
    int64_t v = 0;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        v = v * 10 + (*p - '0');
        if (v > INT32_MAX) return false;
    }
    *out = (int32_t)v;
    return true;
}

static void dec_logit_bias(dec *d, json_t *a, proto_sampling *s)
{
    if (a == NULL || json_is_null(a)) return;
    size_t n = json_is_array(a) ? json_array_size(a) : json_is_object(a) ? json_object_size(a) : 0;
    if (!json_is_array(a) && !json_is_object(a)) {
        dec_fail(d, "sampling.logit_bias must be [[token, bias], ...] or {\"token\": bias}");
        return;
    }
    if (n == 0) return;
    proto_bias *b = malloc(n * sizeof(proto_bias));
    if (b == NULL) {
        dec_fail(d, "sampling.logit_bias: out of memory");
        return;
    }
    size_t i = 0;
    if (json_is_array(a)) {
        for (i = 0; i < n; i++) {
            json_t *pair = json_array_get(a, i);
            json_t *t = json_array_get(pair, 0);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(t) ||
                json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX ||
                !dec_bias_value(json_array_get(pair, 1), &b[i].bias)) {
                dec_fail(d, "sampling.logit_bias[%zu] must be [token id, number or false]", i);
                break;
            }
            b[i].token = (int32_t)json_integer_value(t);
        }
    } else {
        const char *key;
        json_t *v;
        json_object_foreach(a, key, v) {
            if (!parse_token_key(key, &b[i].token) || !dec_bias_value(v, &b[i].bias)) {
                dec_fail(d, "sampling.logit_bias: \"%.32s\" must be a token id with a number "
                            "or false", key);
                break;
            }
            i++;
        }
    }
    if (d->failed) {
        free(b);
        return;
    }
    s->logit_bias = b;
    s->n_logit_bias = n;
}

static void dec_sampling(dec *d, json_t *so, proto_sampling *s)
{
    *s = proto_sampling_default();
    if (so == NULL || json_is_null(so)) return;
    if (!json_is_object(so)) {
        dec_fail(d, "sampling must be an object");
        return;
    }
    dec_float(d, so, "temperature", "sampling.temperature", -FLT_MAX, FLT_MAX, &s->temperature);
    dec_i32(d, so, "top_k", "sampling.top_k", INT32_MIN, INT32_MAX, &s->top_k);
    dec_float(d, so, "top_p", "sampling.top_p", 0.0, 1.0, &s->top_p);
    dec_float(d, so, "min_p", "sampling.min_p", 0.0, 1.0, &s->min_p);
    dec_float(d, so, "typical_p", "sampling.typical_p", 0.0, 1.0, &s->typical_p);
    dec_float(d, so, "repeat_penalty", "sampling.repeat_penalty", 0.0, FLT_MAX,
              &s->repeat_penalty);
    if (!d->failed && !(s->repeat_penalty > 0.0f)) {
        dec_fail(d, "sampling.repeat_penalty must be greater than 0");
    }
    dec_float(d, so, "presence_penalty", "sampling.presence_penalty", -FLT_MAX, FLT_MAX,
              &s->presence_penalty);
    dec_float(d, so, "frequency_penalty", "sampling.frequency_penalty", -FLT_MAX, FLT_MAX,
              &s->frequency_penalty);
    dec_i32(d, so, "penalty_last_n", "sampling.penalty_last_n", 0, PROTO_MAX_PENALTY_LAST_N,
            &s->penalty_last_n);
    dec_float(d, so, "top_n_sigma", "sampling.top_n_sigma", -FLT_MAX, FLT_MAX, &s->top_n_sigma);
    dec_float(d, so, "xtc_probability", "sampling.xtc_probability", 0.0, 1.0, &s->xtc_probability);
    dec_float(d, so, "xtc_threshold", "sampling.xtc_threshold", 0.0, 1.0, &s->xtc_threshold);
    dec_float(d, so, "dynatemp_range", "sampling.dynatemp_range", 0.0, FLT_MAX, &s->dynatemp_range);
    dec_float(d, so, "dynatemp_exponent", "sampling.dynatemp_exponent", 0.0, FLT_MAX,
              &s->dynatemp_exponent);
    dec_i32(d, so, "mirostat", "sampling.mirostat", 0, 2, &s->mirostat);
    dec_float(d, so, "dry_multiplier", "sampling.dry_multiplier", 0.0, FLT_MAX, &s->dry_multiplier);
    dec_float(d, so, "dry_base", "sampling.dry_base", 0.0, FLT_MAX, &s->dry_base);
    dec_i32(d, so, "dry_allowed_length", "sampling.dry_allowed_length", 0, PROTO_MAX_PENALTY_LAST_N,
            &s->dry_allowed_length);
    dec_i32(d, so, "dry_penalty_last_n", "sampling.dry_penalty_last_n", 0, PROTO_MAX_PENALTY_LAST_N,
            &s->dry_penalty_last_n);
    json_t *br = json_object_get(so, "dry_sequence_breakers");
    if (br != NULL && !json_is_null(br) && !d->failed) {
        if (!json_is_array(br) || json_array_size(br) > PROTO_MAX_DRY_BREAKERS) {
            dec_fail(d, "sampling.dry_sequence_breakers must be an array of at most 16 strings");
        } else {
            s->n_dry_breakers = 0;
            size_t i;
            json_t *v;
            json_array_foreach(br, i, v) {
                size_t len = json_string_length(v);
                if (!json_is_string(v) || len == 0 || strlen(json_string_value(v)) != len) {
                    dec_fail(d, "sampling.dry_sequence_breakers must hold non-empty strings");
                    break;
                }
                const char *str = json_string_value(v);
                if (len > PROTO_DRY_BREAKER_BYTES) { /* cut at a character's start */
                    len = PROTO_DRY_BREAKER_BYTES;
                    while (len > 0 && ((unsigned char)str[len] & 0xC0) == 0x80) len--;
                }
                memcpy(s->dry_breakers[s->n_dry_breakers], str, len);
                s->dry_breakers[s->n_dry_breakers++][len] = '\0';
            }
        }
    }
    dec_float(d, so, "mirostat_tau", "sampling.mirostat_tau", 0.0, FLT_MAX, &s->mirostat_tau);
    dec_float(d, so, "mirostat_eta", "sampling.mirostat_eta", 0.0, FLT_MAX, &s->mirostat_eta);
    int64_t seed = 0;
    dec_int(d, so, "seed", "sampling.seed", false, 0, INT64_MAX, &seed, &s->has_seed);
    if (s->has_seed) s->seed = (uint64_t)seed;
    dec_logit_bias(d, json_object_get(so, "logit_bias"), s);
}

/* gen/embed `cache`: true when it says false. */
static bool dec_cache_off(dec *d, json_t *o)
{
    json_t *v = json_object_get(o, "cache");
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
        dec_fail(d, "cache must be true or false");
    }
    return json_is_false(v);
}

/* gen `bad_words`: arrays of 1..PROTO_MAX_BAD_WORD_TOKENS token ids. */
static void dec_bad_words(dec *d, json_t *a, proto_gen *g)
{
    if (a == NULL || json_is_null(a) || d->failed) return;
    if (!json_is_array(a) || json_array_size(a) > PROTO_MAX_BAD_WORDS) {
        dec_fail(d, "bad_words must be an array of at most %d arrays of token ids", PROTO_MAX_BAD_WORDS);
        return;
    }
    size_t n = json_array_size(a);
    g->bad_ids = malloc((n * PROTO_MAX_BAD_WORD_TOKENS + 1) * sizeof(int32_t));
    g->bad_len = malloc((n + 1) * sizeof(int32_t));
    if (g->bad_ids == NULL || g->bad_len == NULL) {
        dec_fail(d, "bad_words: out of memory");
        return;
    }
    size_t at = 0, i;
    json_t *w;
    json_array_foreach(a, i, w) {
        size_t k = json_is_array(w) ? json_array_size(w) : 0;
        if (k < 1 || k > PROTO_MAX_BAD_WORD_TOKENS) {
            dec_fail(d, "bad_words[%zu] must hold 1 to %d token ids", i, PROTO_MAX_BAD_WORD_TOKENS);
            return;
        }
        for (size_t j = 0; j < k; j++) {
            json_t *t = json_array_get(w, j);
            if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
                dec_fail(d, "bad_words[%zu][%zu] must be a token id", i, j);
                return;
            }
            g->bad_ids[at++] = (int32_t)json_integer_value(t);
        }
        g->bad_len[g->n_bad++] = (int32_t)k;
    }
}

static void dec_gen(dec *d, json_t *o, proto_gen *g)
{
    dec_tokens(d, o, "tokens", true, true, &g->tokens, &g->n_tokens);
    g->max_tokens = -1;
    dec_int(d, o, "max_tokens", "max_tokens", false, -1, INT64_MAX, &g->max_tokens, NULL);
    dec_sampling(d, json_object_get(o, "sampling"), &g->sampling);
    dec_tokens(d, o, "stop_tokens", false, false, &g->stop_tokens, &g->n_stop_tokens);
    dec_tokens(d, o, "min_bans", false, false, &g->min_bans, &g->n_min_bans);
    dec_tokens(d, o, "allowed_tokens", false, false, &g->allowed_tokens, &g->n_allowed_tokens);
    dec_bad_words(d, json_object_get(o, "bad_words"), g);
    json_t *v = json_object_get(o, "ignore_eos");
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
        dec_fail(d, "ignore_eos must be true or false");
    }
    g->ignore_eos = json_is_true(v);
    dec_int(d, o, "min_tokens", "min_tokens", false, 0, INT64_MAX, &g->min_tokens, NULL);
    g->logprobs = -1;
    v = json_object_get(o, "logprobs");
    if (v == NULL || json_is_null(v) || json_is_false(v)) {
        g->logprobs = -1;
    } else if (json_is_true(v)) {
        g->logprobs = 0;
    } else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) <= PROTO_MAX_LOGPROBS) {
        g->logprobs = json_integer_value(v) == 0 ? -1 : (int32_t)json_integer_value(v);
    } else {
        dec_fail(d, "logprobs must be a boolean or an integer in [0, %d]", PROTO_MAX_LOGPROBS);
    }
    v = json_object_get(o, "prompt_logprobs");
    if (v == NULL || json_is_null(v) || json_is_false(v)) {
        g->prompt_logprobs = false;
    } else if (json_is_true(v)) {
        g->prompt_logprobs = true;
    } else if (json_is_integer(v) && json_integer_value(v) >= 0 &&
               json_integer_value(v) <= PROTO_MAX_LOGPROBS) {
        g->prompt_logprobs = json_integer_value(v) > 0;
        g->prompt_top = (int32_t)json_integer_value(v);
    } else {
        dec_fail(d, "prompt_logprobs must be a boolean or an integer in [0, %d]", PROTO_MAX_LOGPROBS);
    }
    g->no_cache = dec_cache_off(d, o);
    v = json_object_get(o, "progress");
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) dec_fail(d, "progress must be true or false");
    g->progress = json_is_true(v);
    v = json_object_get(o, "grammar");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v)) {
            dec_fail(d, "grammar must be a string");
        } else if ((g->grammar = strdup(json_string_value(v))) == NULL) {
            dec_fail(d, "grammar: out of memory");
        }
    }
    v = json_object_get(o, "speculative");
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
        dec_fail(d, "speculative must be true or false");
    }
    g->no_speculative = json_is_false(v);
    int64_t dmax = 0;
    dec_int(d, o, "draft_max", "draft_max", false, 0, INT32_MAX, &dmax, &g->has_draft_max);
    g->draft_max = (int32_t)dmax;
}

static void dec_embed(dec *d, json_t *o, proto_embed *e)
{
    dec_tokens(d, o, "tokens", true, true, &e->tokens, &e->n_tokens);
    e->no_cache = dec_cache_off(d, o);
    json_t *v = json_object_get(o, "pooling");
    e->pooling = PROTO_POOLING_DEFAULT;
    if (v == NULL || json_is_null(v)) return;
    const char *s = json_string_value(v);
    if (s != NULL && strcmp(s, "mean") == 0) e->pooling = PROTO_POOLING_MEAN;
    else if (s != NULL && strcmp(s, "cls") == 0) e->pooling = PROTO_POOLING_CLS;
    else if (s != NULL && strcmp(s, "last") == 0) e->pooling = PROTO_POOLING_LAST;
    else dec_fail(d, "pooling must be \"mean\", \"cls\" or \"last\"");
}

static char *dec_strdup(dec *d, json_t *obj, const char *key, const char *path)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v)) {
        dec_fail(d, "%s must be a string", path);
        return NULL;
    }
    char *s = strdup(json_string_value(v));
    if (s == NULL) dec_fail(d, "%s: out of memory", path);
    return s;
}

static json_t *dec_object(dec *d, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_object(v)) {
        dec_fail(d, "%s must be an object", key);
        return NULL;
    }
    return v;
}

static void dec_ready(dec *d, json_t *o, proto_ready *r)
{
    dec_int(d, o, "protocol", "protocol", true, 1, INT64_MAX, &r->protocol, NULL);
    json_t *mo = dec_object(d, o, "model");
    if (mo != NULL) {
        r->arch = dec_strdup(d, mo, "arch", "model.arch");
        dec_int(d, mo, "n_ctx_train", "model.n_ctx_train", true, 0, INT64_MAX, &r->n_ctx_train,
                NULL);
        dec_int(d, mo, "n_vocab", "model.n_vocab", true, 1, INT32_MAX, &r->n_vocab, NULL);
        dec_int(d, mo, "n_embd", "model.n_embd", true, 1, INT64_MAX, &r->n_embd, NULL);
        dec_int(d, mo, "n_layer", "model.n_layer", false, 0, INT64_MAX, &r->n_layer, NULL);
    }
    dec_int(d, o, "slots", "slots", true, 1, INT64_MAX, &r->slots, NULL);
    dec_int(d, o, "n_ctx", "n_ctx", true, 1, INT64_MAX, &r->n_ctx, NULL);
    dec_int(d, o, "n_batch", "n_batch", false, 0, INT64_MAX, &r->n_batch, NULL);
    json_t *kv = dec_object(d, o, "kv");
    if (kv != NULL) {
        r->kv_type = dec_strdup(d, kv, "type", "kv.type");
        dec_int(d, kv, "block_tokens", "kv.block_tokens", false, 0, INT64_MAX,
                &r->kv_block_tokens, NULL);
        dec_int(d, kv, "n_blocks", "kv.n_blocks", false, 0, INT64_MAX, &r->kv_n_blocks, NULL);
        dec_int(d, kv, "bytes", "kv.bytes", false, 0, INT64_MAX, &r->kv_bytes, NULL);
        json_t *v = json_object_get(kv, "prefix_cache");
        if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
            dec_fail(d, "kv.prefix_cache must be true or false");
        }
        r->kv_prefix_cache = json_is_true(v);
        dec_int(d, kv, "cache_blocks", "kv.cache_blocks", false, 0, INT64_MAX,
                &r->kv_cache_blocks, NULL);
        dec_int(d, kv, "cache_bytes", "kv.cache_bytes", false, 0, INT64_MAX, &r->kv_cache_bytes,
                NULL);
        dec_int(d, kv, "cache_min_tokens", "kv.cache_min_tokens", false, 0, INT64_MAX,
                &r->kv_cache_min_tokens, NULL);
        dec_int(d, kv, "max_tokens", "kv.max_tokens", false, 0, INT64_MAX, &r->kv_max_tokens,
                NULL);
        dec_int(d, kv, "init_tokens", "kv.init_tokens", false, 0, INT64_MAX, &r->kv_init_tokens,
                NULL);
        dec_int(d, kv, "step_tokens", "kv.step_tokens", false, 0, INT64_MAX, &r->kv_step_tokens,
                NULL);
        dec_int(d, kv, "hold_ms", "kv.hold_ms", false, 0, INT64_MAX, &r->kv_hold_ms, NULL);
        v = json_object_get(kv, "resident");
        if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
            dec_fail(d, "kv.resident must be true or false");
        }
        r->kv_resident = json_is_true(v);
    }
    json_t *dr = json_object_get(o, "draft");
    if (dr != NULL && !json_is_null(dr) && !d->failed) {
        dr = dec_object(d, o, "draft");
        if (dr != NULL) {
            r->draft_source = dec_strdup(d, dr, "source", "draft.source");
            dec_int(d, dr, "max", "draft.max", true, 0, INT64_MAX, &r->draft_max, NULL);
            dec_int(d, dr, "min", "draft.min", false, 0, INT64_MAX, &r->draft_min, NULL);
            json_t *v = json_object_get(dr, "p_min");
            if (v != NULL && !json_is_null(v)) {
                if (!json_is_number(v)) dec_fail(d, "draft.p_min must be a number");
                else r->draft_p_min = json_number_value(v);
            }
        }
    }
}

/* `logprobs` entries a (n of them) into *out (calloc'd; NULL when a is
 * absent or null). */
static void dec_logprobs(dec *d, json_t *a, size_t n, proto_logprob **out)
{
    if (d->failed || a == NULL || json_is_null(a)) return;
    if (!json_is_array(a) || json_array_size(a) != n) {
        dec_fail(d, "logprobs must be an array with one entry per token");
        return;
    }
    proto_logprob *lps = calloc(n ? n : 1, sizeof(proto_logprob));
    *out = lps;
    if (lps == NULL) {
        dec_fail(d, "logprobs: out of memory");
        return;
    }
    for (size_t i = 0; i < n && !d->failed; i++) {
        json_t *e = json_array_get(a, i);
        proto_logprob *lp = &lps[i];
        json_t *tv = json_object_get(e, "token");
        if (!json_is_object(e) || !json_is_integer(tv) || json_integer_value(tv) < 0 ||
            json_integer_value(tv) > INT32_MAX ||
            !dec_float_value(json_object_get(e, "logprob"), -FLT_MAX, FLT_MAX, &lp->logprob)) {
            dec_fail(d, "logprobs[%zu] must be {\"token\": id, \"logprob\": number}", i);
            break;
        }
        lp->token = (int32_t)json_integer_value(tv);
        json_t *rv = json_object_get(e, "rank");
        if (rv != NULL && !json_is_null(rv)) {
            if (!json_is_integer(rv) || json_integer_value(rv) < 1 || json_integer_value(rv) > INT32_MAX) {
                dec_fail(d, "logprobs[%zu].rank must be an integer >= 1", i);
                break;
            }
            lp->rank = (int32_t)json_integer_value(rv);
        }
        json_t *top = json_object_get(e, "top");
        if (top == NULL || json_is_null(top)) continue;
        if (!json_is_array(top)) {
            dec_fail(d, "logprobs[%zu].top must be an array", i);
            break;
        }
        size_t nt = json_array_size(top);
        if (nt == 0) continue;
        lp->top = malloc(nt * sizeof(proto_top));
        if (lp->top == NULL) {
            dec_fail(d, "logprobs: out of memory");
            break;
        }
        lp->n_top = nt;
        for (size_t j = 0; j < nt; j++) {
            json_t *pair = json_array_get(top, j);
            json_t *pt = json_array_get(pair, 0);
            if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(pt) ||
                json_integer_value(pt) < 0 || json_integer_value(pt) > INT32_MAX ||
                !dec_float_value(json_array_get(pair, 1), -FLT_MAX, FLT_MAX,
                                 &lp->top[j].logprob)) {
                dec_fail(d, "logprobs[%zu].top[%zu] must be [token id, number]", i, j);
                break;
            }
            lp->top[j].token = (int32_t)json_integer_value(pt);
        }
    }
}

static void dec_tok(dec *d, json_t *o, proto_tok *t)
{
    dec_tokens(d, o, "tokens", true, true, &t->tokens, &t->n_tokens);
    dec_logprobs(d, json_object_get(o, "logprobs"), t->n_tokens, &t->logprobs);
}

static void dec_plp(dec *d, json_t *o, proto_plp *p)
{
    dec_int(d, o, "from", "from", true, 1, INT32_MAX, &p->from, NULL);
    json_t *a = json_object_get(o, "logprobs");
    if (d->failed) return;
    if (!json_is_array(a) || json_array_size(a) == 0) {
        dec_fail(d, "logprobs must be a non-empty array");
        return;
    }
    p->n = json_array_size(a);
    dec_logprobs(d, a, p->n, &p->logprobs);
}

static void dec_emb(dec *d, json_t *o, proto_emb *e)
{
    json_t *a = json_object_get(o, "vector");
    if (!json_is_array(a)) {
        dec_fail(d, "vector must be an array of numbers");
        return;
    }
    size_t n = json_array_size(a);
    e->vector = malloc((n ? n : 1) * sizeof(float));
    if (e->vector == NULL) {
        dec_fail(d, "vector: out of memory");
        return;
    }
    e->n = n;
    for (size_t i = 0; i < n; i++) {
        if (!dec_float_value(json_array_get(a, i), -FLT_MAX, FLT_MAX, &e->vector[i])) {
            dec_fail(d, "vector[%zu] must be a number", i);
            return;
        }
    }
}

static void dec_done(dec *d, json_t *o, proto_done *dn)
{
    const char *f = json_string_value(json_object_get(o, "finish"));
    if (f != NULL && strcmp(f, "stop") == 0) dn->finish = PROTO_FINISH_STOP;
    else if (f != NULL && strcmp(f, "length") == 0) dn->finish = PROTO_FINISH_LENGTH;
    else if (f != NULL && strcmp(f, "cancelled") == 0) dn->finish = PROTO_FINISH_CANCELLED;
    else dec_fail(d, "finish must be \"stop\", \"length\" or \"cancelled\"");
    json_t *so = dec_object(d, o, "stats");
    if (so == NULL) return;
    proto_stats *s = &dn->stats;
    dec_int(d, so, "prompt_n", "stats.prompt_n", true, 0, INT64_MAX, &s->prompt_n, NULL);
    dec_int(d, so, "cached_n", "stats.cached_n", true, 0, INT64_MAX, &s->cached_n, NULL);
    dec_int(d, so, "predicted_n", "stats.predicted_n", true, 0, INT64_MAX, &s->predicted_n,
            NULL);
    dec_double(d, so, "prompt_ms", "stats.prompt_ms", &s->prompt_ms);
    dec_double(d, so, "predicted_ms", "stats.predicted_ms", &s->predicted_ms);
    dec_int(d, so, "draft_n", "stats.draft_n", false, 0, INT64_MAX, &s->draft_n, NULL);
    dec_int(d, so, "draft_accepted_n", "stats.draft_accepted_n", false, 0, INT64_MAX,
            &s->draft_accepted_n, NULL);
    dec_int(d, so, "preempted", "stats.preempted", false, 0, INT64_MAX, &s->preempted, NULL);
}

/* A number >= 0 (integer or real); required. */
static void dec_nonneg(dec *d, json_t *obj, const char *key, const char *path, double *out)
{
    dec_double(d, obj, key, path, out);
    if (!d->failed && *out < 0) dec_fail(d, "%s must be a number >= 0", path);
}

static void dec_pong(dec *d, json_t *o, proto_pong *pg)
{
    if (json_object_get(o, "steps") != NULL) {
        pg->has_progress = true;
        dec_int(d, o, "steps", "steps", true, 0, INT64_MAX, &pg->steps, NULL);
        json_t *v = json_object_get(o, "running");
        if (!json_is_boolean(v)) dec_fail(d, "running must be true or false");
        pg->running = json_is_true(v);
        dec_nonneg(d, o, "step_ms", "step_ms", &pg->step_ms);
        dec_int(d, o, "step_tokens", "step_tokens", true, 0, INT64_MAX, &pg->step_tokens, NULL);
        dec_nonneg(d, o, "ms_per_token", "ms_per_token", &pg->ms_per_token);
    }
    json_t *kv = json_object_get(o, "kv");
    if (kv == NULL || d->failed) return;
    if (!json_is_object(kv)) {
        dec_fail(d, "kv must be an object");
        return;
    }
    pg->has_kv = true;
    dec_int(d, kv, "blocks", "kv.blocks", true, 0, INT64_MAX, &pg->kv_blocks, NULL);
    dec_int(d, kv, "used", "kv.used", true, 0, INT64_MAX, &pg->kv_used, NULL);
    dec_int(d, kv, "bytes", "kv.bytes", true, 0, INT64_MAX, &pg->kv_bytes, NULL);
    dec_int(d, kv, "cached", "kv.cached", false, 0, INT64_MAX, &pg->kv_cached, NULL);
    dec_int(d, kv, "lookup_tokens", "kv.lookup_tokens", false, 0, INT64_MAX,
            &pg->kv_lookup_tokens, NULL);
    dec_int(d, kv, "hit_tokens", "kv.hit_tokens", false, 0, INT64_MAX, &pg->kv_hit_tokens, NULL);
    dec_int(d, kv, "committed_bytes", "kv.committed_bytes", false, 0, INT64_MAX,
            &pg->kv_committed_bytes, NULL);
    dec_int(d, kv, "preemptions", "kv.preemptions", false, 0, INT64_MAX, &pg->kv_preemptions,
            NULL);
}

static void dec_errmsg(dec *d, json_t *o, proto_errmsg *e)
{
    e->code = dec_strdup(d, o, "code", "code");
    e->message = dec_strdup(d, o, "message", "message");
}

static proto_op op_from_name(const char *s, proto_dir dir)
{
    proto_op first = dir == PROTO_DIR_TO_ENGINE ? PROTO_OP_GEN : PROTO_OP_READY;
    proto_op last = dir == PROTO_DIR_TO_ENGINE ? PROTO_OP_SHUTDOWN : PROTO_OP_PROG;
    for (int op = (int)first; op <= (int)last; op++) {
        if (strcmp(s, k_op_names[op]) == 0) return (proto_op)op;
    }
    return PROTO_OP_NONE;
}

/* Copies s for a message: at most max bytes, control characters as '?'. */
static void quote_for_message(char *out, size_t out_size, const char *s, size_t max)
{
    size_t n = 0;
    for (; s[n] != '\0' && n < max && n + 1 < out_size; n++) {
        out[n] = (unsigned char)s[n] < 0x20 ? '?' : s[n];
    }
    out[n] = '\0';
}

int proto_decode(const char *line, size_t len, proto_dir dir, proto_msg *out, proto_error *perr)
{
    memset(out, 0, sizeof(*out));
    memset(perr, 0, sizeof(*perr));
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL || !json_is_object(root)) {
        perr->code = PROTO_ERR_BAD_JSON;
        perr->has_id = proto_peek_id(line, len < 4096 ? len : 4096, &perr->id);
        if (root == NULL) {
            snprintf(perr->message, sizeof(perr->message), "not valid JSON: %s (column %d)",
                     je.text, je.column);
        } else {
            snprintf(perr->message, sizeof(perr->message), "the line is not a JSON object");
        }
        json_decref(root);
        return STRATA_EFORMAT;
    }
    json_t *jid = json_object_get(root, "id");
    bool id_ok = json_is_integer(jid) && json_integer_value(jid) >= 0 &&
                 json_integer_value(jid) <= PROTO_ID_MAX;
    if (id_ok) {
        perr->has_id = true;
        perr->id = json_integer_value(jid);
    }
    json_t *jop = json_object_get(root, "op");
    const char *op_s = json_string_value(jop);
    proto_op op = op_s != NULL ? op_from_name(op_s, dir) : PROTO_OP_NONE;
    if (op == PROTO_OP_NONE) {
        perr->code = PROTO_ERR_UNKNOWN_OP;
        if (jop == NULL) {
            snprintf(perr->message, sizeof(perr->message), "the line has no \"op\"");
        } else if (op_s == NULL) {
            snprintf(perr->message, sizeof(perr->message), "\"op\" must be a string");
        } else {
            char q[72];
            quote_for_message(q, sizeof(q), op_s, 64);
            snprintf(perr->message, sizeof(perr->message), "unknown op \"%s\"", q);
        }
        json_decref(root);
        return STRATA_EFORMAT;
    }
    perr->op = op;
    dec d = {.perr = perr, .op = k_op_names[op]};
    out->op = op;
    bool id_given = op == PROTO_OP_ERR && jid != NULL && !json_is_null(jid);
    if ((op_has_id(op) && op != PROTO_OP_ERR) || id_given) {
        if (jid == NULL) {
            dec_fail(&d, "missing id");
        } else if (!id_ok) {
            dec_fail(&d, "id must be an integer in [0, %lld]", (long long)PROTO_ID_MAX);
        } else {
            out->has_id = true;
            out->id = perr->id;
        }
    }
    if (!d.failed) {
        switch (op) {
        case PROTO_OP_GEN: dec_gen(&d, root, &out->u.gen); break;
        case PROTO_OP_EMBED: dec_embed(&d, root, &out->u.embed); break;
        case PROTO_OP_READY: dec_ready(&d, root, &out->u.ready); break;
        case PROTO_OP_TOK: dec_tok(&d, root, &out->u.tok); break;
        case PROTO_OP_PLP: dec_plp(&d, root, &out->u.plp); break;
        case PROTO_OP_PROG: {
            proto_prog *pg = &out->u.prog;
            dec_int(&d, root, "total", "total", true, 1, INT64_MAX, &pg->total, NULL);
            dec_int(&d, root, "processed", "processed", true, 0, pg->total, &pg->processed, NULL);
            dec_int(&d, root, "cached", "cached", true, 0, pg->total, &pg->cached, NULL);
            json_t *ms = json_object_get(root, "ms");
            if (!d.failed && (!json_is_number(ms) || json_number_value(ms) < 0)) dec_fail(&d, "ms must be a number >= 0");
            else if (!d.failed) pg->ms = json_number_value(ms);
            break;
        }
        case PROTO_OP_EMB: dec_emb(&d, root, &out->u.emb); break;
        case PROTO_OP_DONE: dec_done(&d, root, &out->u.done); break;
        case PROTO_OP_ERR: dec_errmsg(&d, root, &out->u.err); break;
        case PROTO_OP_PONG: dec_pong(&d, root, &out->u.pong); break;
        default: break;
        }
    }
    json_decref(root);
    if (d.failed) {
        proto_msg_free(out);
        return STRATA_EFORMAT;
    }
    return 0;
}

bool proto_peek_id(const char *prefix, size_t len, int64_t *id)
{
    static const char key[] = "\"id\"";
    const size_t key_len = sizeof(key) - 1;
    for (size_t i = 0; i + key_len <= len; i++) {
        if (memcmp(prefix + i, key, key_len) != 0) continue;
        size_t p = i + key_len;
        while (p < len && (prefix[p] == ' ' || prefix[p] == '\t')) p++;
        if (p >= len || prefix[p] != ':') continue;
        p++;
        while (p < len && (prefix[p] == ' ' || prefix[p] == '\t')) p++;
        if (p >= len || prefix[p] < '0' || prefix[p] > '9') return false;
        int64_t v = 0;
        for (; p < len && prefix[p] >= '0' && prefix[p] <= '9'; p++) {
            v = v * 10 + (prefix[p] - '0');
            if (v > PROTO_ID_MAX) return false;
        }
        /* The number must end inside the prefix and be an integer. */
        if (p >= len || prefix[p] == '.' || prefix[p] == 'e' || prefix[p] == 'E') return false;
        *id = v;
        return true;
    }
    return false;
}

/* ==== The line reader ==== */

#define READ_CHUNK 65536

void proto_reader_init(proto_reader *r, size_t max_line)
{
    memset(r, 0, sizeof(*r));
    r->max_line = max_line ? max_line : PROTOCOL_MAX_LINE;
}

void proto_reader_free(proto_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

/* Drops consumed bytes and makes room for extra more. */
static int reader_reserve(proto_reader *r, size_t extra)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
    }
    if (r->cap - r->len >= extra) return 0;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap - r->len < extra) {
        if (cap > SIZE_MAX / 2) return STRATA_ENOMEM;
        cap *= 2;
    }
    char *p = realloc(r->buf, cap);
    if (p == NULL) return STRATA_ENOMEM;
    r->buf = p;
    r->cap = cap;
    return 0;
}

int proto_reader_feed(proto_reader *r, const void *data, size_t n)
{
    const char *src = data;
    if (r->skipping && r->start == r->len) {
        /* Nothing buffered: drop the oversized line's bytes without storing them. */
        const char *nl = memchr(src, '\n', n);
        if (nl == NULL) return 0;
        r->skipping = false;
        n -= (size_t)(nl + 1 - src);
        src = nl + 1;
    }
    if (n == 0) return 0;
    if (reader_reserve(r, n) != 0) return STRATA_ENOMEM;
    memcpy(r->buf + r->len, src, n);
    r->len += n;
    return 0;
}

void proto_reader_set_eof(proto_reader *r)
{
    r->eof = true;
}

long proto_reader_fill(proto_reader *r, int fd, strata_err *err)
{
    if (reader_reserve(r, READ_CHUNK) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "protocol reader: out of memory");
    }
    ssize_t n;
    do {
        n = read(fd, r->buf + r->len, READ_CHUNK);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return strata_err_set(err, STRATA_EIO, "read: %s", strerror(errno));
    if (n == 0) {
        r->eof = true;
        return 0;
    }
    if (r->skipping && r->start == r->len) {
        /* Drop what belongs to the oversized line right away. */
        char *nl = memchr(r->buf + r->len, '\n', (size_t)n);
        if (nl == NULL) return n;
        r->skipping = false;
        size_t rest = (size_t)n - (size_t)(nl + 1 - (r->buf + r->len));
        memmove(r->buf + r->len, nl + 1, rest);
        r->len += rest;
        return n;
    }
    r->len += (size_t)n;
    return n;
}

static void reader_keep_head(proto_reader *r, const char *p, size_t n)
{
    r->n_head = n < sizeof(r->head) ? n : sizeof(r->head);
    memcpy(r->head, p, r->n_head);
}

int proto_reader_next(proto_reader *r, const char **line, size_t *len)
{
    if (r->buf == NULL) return r->eof ? PROTO_READ_EOF : PROTO_READ_NEED_MORE;
    for (;;) {
        if (r->skipping) {
            char *nl = memchr(r->buf + r->start, '\n', r->len - r->start);
            if (nl == NULL) {
                r->start = r->len = 0;
                r->scanned = 0;
                return r->eof ? PROTO_READ_EOF : PROTO_READ_NEED_MORE;
            }
            r->start = (size_t)(nl + 1 - r->buf);
            r->skipping = false;
            r->scanned = 0;
        }
        size_t avail = r->len - r->start;
        char *base = r->buf + r->start;
        char *nl = avail > r->scanned ? memchr(base + r->scanned, '\n', avail - r->scanned) : NULL;
        if (nl != NULL) {
            size_t n = (size_t)(nl - base);
            r->start += n + 1;
            r->scanned = 0;
            if (n > r->max_line) {
                reader_keep_head(r, base, n);
                *line = r->head;
                *len = r->n_head;
                return PROTO_READ_TOO_LONG;
            }
            if (n > 0 && base[n - 1] == '\r') n--;
            if (n == 0) continue; /* blank line */
            *line = base;
            *len = n;
            return PROTO_READ_LINE;
        }
        r->scanned = avail;
        if (avail > r->max_line) {
            reader_keep_head(r, base, avail);
            r->skipping = true;
            r->start = r->len = 0;
            r->scanned = 0;
            *line = r->head;
            *len = r->n_head;
            return PROTO_READ_TOO_LONG;
        }
        if (!r->eof) return PROTO_READ_NEED_MORE;
        if (avail == 0) return PROTO_READ_EOF;
        r->start = r->len;
        r->scanned = 0;
        size_t n = avail;
        if (base[n - 1] == '\r') n--;
        if (n == 0) return PROTO_READ_EOF;
        *line = base;
        *len = n;
        return PROTO_READ_LINE;
    }
}
