/* Helpers for the engine tests (header-only: each test program is one .c
 * file): a collector that decodes engine → server lines and keeps, per
 * id, what a client would see, checking the terminal-message invariant as
 * it goes; and the golden greedy data of stories260K. Include after
 * <cmocka.h>. */
#ifndef STRATA_TESTS_ENGINE_TESTUTIL_H
#define STRATA_TESTS_ENGINE_TESTUTIL_H

#include "engine/engine.h"
#include "engine/protocol.h"
#include "testdata.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ET_MAX_IDS 1024

typedef struct et_rec {
    bool seen;
    int32_t *toks;
    size_t n_tok, cap_tok;
    int n_terminal;          /* done + err; must end at 1 */
    bool after_terminal;     /* anything named the id after its terminal */
    bool done;
    proto_finish finish;
    proto_stats stats;
    char err_code[32];
    char err_msg[512];
    float *emb;
    size_t n_emb;
    int n_emb_msgs;
    proto_logprob *lps;      /* (n_tok) when asked; top arrays owned */
    size_t n_lps;
    proto_logprob *plp;      /* `plp` entries: plp[i] is prompt token i + 1's; top owned */
    size_t n_plp, cap_plp;
    int n_plp_msgs;
    bool plp_bad;            /* a `plp` out of order, or after a `tok` */
    int n_prog;              /* `prog` lines */
    proto_prog last_prog;
    bool prog_bad;           /* a `prog` after a `tok`, or going back */
} et_rec;

typedef struct et_collect {
    et_rec recs[ET_MAX_IDS]; /* by id */
    int n_pong;
    int64_t last_pong;
    int n_anon_err;          /* err without an id */
    char anon_code[32];
    char anon_msg[512];
    int n_ready;
    int n_bad;               /* lines that did not decode */
} et_collect;

static inline et_collect *et_collect_new(void)
{
    et_collect *c = calloc(1, sizeof(et_collect));
    if (c == NULL) fail_msg("out of memory");
    return c;
}

static inline void et_collect_free(et_collect *c)
{
    for (int i = 0; i < ET_MAX_IDS; i++) {
        et_rec *r = &c->recs[i];
        free(r->toks);
        free(r->emb);
        for (size_t k = 0; k < r->n_lps; k++) free(r->lps[k].top);
        free(r->lps);
        for (size_t k = 0; k < r->n_plp; k++) free(r->plp[k].top);
        free(r->plp);
    }
    free(c);
}

/* Takes one line (without '\n'). */
static inline void et_collect_line(et_collect *c, const char *line, size_t len)
{
    proto_msg m;
    proto_error pe;
    if (proto_decode(line, len, PROTO_DIR_TO_SERVER, &m, &pe) != 0) {
        c->n_bad++;
        print_error("undecodable line from the engine: %s: %.*s\n", pe.message,
                    (int)(len > 200 ? 200 : len), line);
        return;
    }
    if (m.op == PROTO_OP_READY) {
        c->n_ready++;
    } else if (m.op == PROTO_OP_PONG) {
        c->n_pong++;
        c->last_pong = m.id;
    } else if (m.op == PROTO_OP_ERR && !m.has_id) {
        c->n_anon_err++;
        snprintf(c->anon_code, sizeof(c->anon_code), "%s", m.u.err.code);
        snprintf(c->anon_msg, sizeof(c->anon_msg), "%s", m.u.err.message);
    } else if (m.id >= 0 && m.id < ET_MAX_IDS) {
        et_rec *r = &c->recs[m.id];
        r->seen = true;
        if (r->n_terminal > 0) r->after_terminal = true;
        switch (m.op) {
        case PROTO_OP_TOK:
            for (size_t i = 0; i < m.u.tok.n_tokens; i++) {
                if (r->n_tok == r->cap_tok) {
                    r->cap_tok = r->cap_tok ? r->cap_tok * 2 : 64;
                    r->toks = realloc(r->toks, r->cap_tok * sizeof(int32_t));
                    r->lps = realloc(r->lps, r->cap_tok * sizeof(proto_logprob));
                }
                r->toks[r->n_tok++] = m.u.tok.tokens[i];
                if (m.u.tok.logprobs != NULL) {
                    r->lps[r->n_lps++] = m.u.tok.logprobs[i];
                    m.u.tok.logprobs[i].top = NULL; /* moved */
                }
            }
            break;
        case PROTO_OP_PLP:
            r->n_plp_msgs++;
            if (m.u.plp.from != (int64_t)r->n_plp + 1 || r->n_tok > 0) r->plp_bad = true;
            for (size_t i = 0; i < m.u.plp.n; i++) {
                if (r->n_plp == r->cap_plp) {
                    r->cap_plp = r->cap_plp ? r->cap_plp * 2 : 64;
                    r->plp = realloc(r->plp, r->cap_plp * sizeof(proto_logprob));
                }
                r->plp[r->n_plp++] = m.u.plp.logprobs[i];
                m.u.plp.logprobs[i].top = NULL; /* moved */
            }
            break;
        case PROTO_OP_PROG:
            if (r->n_tok > 0 || (r->n_prog > 0 && m.u.prog.processed < r->last_prog.processed)) r->prog_bad = true;
            r->n_prog++;
            r->last_prog = m.u.prog;
            break;
        case PROTO_OP_EMB:
            free(r->emb);
            r->emb = m.u.emb.vector;
            r->n_emb = m.u.emb.n;
            m.u.emb.vector = NULL;
            r->n_emb_msgs++;
            break;
        case PROTO_OP_DONE:
            r->n_terminal++;
            r->done = true;
            r->finish = m.u.done.finish;
            r->stats = m.u.done.stats;
            break;
        case PROTO_OP_ERR:
            r->n_terminal++;
            snprintf(r->err_code, sizeof(r->err_code), "%s", m.u.err.code);
            snprintf(r->err_msg, sizeof(r->err_msg), "%s", m.u.err.message);
            break;
        default: break;
        }
    } else {
        print_error("engine named id %lld, outside the test's range\n", (long long)m.id);
        c->n_bad++;
    }
    proto_msg_free(&m);
}

/* Takes every whole line of buf and empties it. */
static inline void et_collect_buf(et_collect *c, proto_buf *buf)
{
    size_t start = 0;
    for (size_t i = 0; i < buf->len; i++) {
        if (buf->data[i] != '\n') continue;
        et_collect_line(c, buf->data + start, i - start);
        start = i + 1;
    }
    assert_int_equal(start, buf->len); /* the engine writes whole lines only */
    buf->len = 0;
}

/* The id ended exactly once with done and nothing came after. */
static inline void et_assert_done(const et_collect *c, int64_t id, proto_finish finish)
{
    const et_rec *r = &c->recs[id];
    if (r->n_terminal != 1 || !r->done) {
        fail_msg("id %lld: %d terminal messages, done=%d (err %s: %s)", (long long)id,
                 r->n_terminal, r->done, r->err_code, r->err_msg);
    }
    if (r->after_terminal) fail_msg("id %lld: a message came after its terminal", (long long)id);
    if (r->finish != finish) {
        fail_msg("id %lld: finish %s, want %s", (long long)id, proto_finish_name(r->finish),
                 proto_finish_name(finish));
    }
    if (r->stats.predicted_n != (int64_t)r->n_tok) {
        fail_msg("id %lld: predicted_n %lld but %zu tokens sent", (long long)id,
                 (long long)r->stats.predicted_n, r->n_tok);
    }
}

static inline void et_assert_err(const et_collect *c, int64_t id, const char *code)
{
    const et_rec *r = &c->recs[id];
    if (r->n_terminal != 1 || r->done) {
        fail_msg("id %lld: %d terminal messages, done=%d; want one err %s", (long long)id,
                 r->n_terminal, r->done, code);
    }
    if (strcmp(r->err_code, code) != 0) {
        fail_msg("id %lld: err %s (%s), want %s", (long long)id, r->err_code, r->err_msg, code);
    }
    if (r->after_terminal) fail_msg("id %lld: a message came after its terminal", (long long)id);
    if (r->n_tok != 0) fail_msg("id %lld: tokens before an err", (long long)id);
}

/* ---- golden data ---- */

typedef struct et_golden {
    int32_t prompt[64];
    size_t n_prompt;
    int32_t gen[512];
    size_t n_gen;
} et_golden;

/* The greedy results of golden/stories260K-greedy.json (skips the test
 * when the data is missing). Returns how many (at most max). */
static inline size_t et_load_greedy(et_golden *out, size_t max)
{
    char path[4096];
    TESTDATA_FILE(path, "golden/stories260K-greedy.json");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (root == NULL) fail_msg("%s: %s", path, je.text);
    json_t *results = json_object_get(root, "results");
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(results) && n < max; i++) {
        json_t *r = json_array_get(results, i);
        json_t *p = json_object_get(r, "prompt_ids"), *g = json_object_get(r, "gen_ids");
        et_golden *o = &out[n++];
        o->n_prompt = json_array_size(p);
        o->n_gen = json_array_size(g);
        assert_true(o->n_prompt <= 64 && o->n_gen <= 512);
        for (size_t k = 0; k < o->n_prompt; k++) {
            o->prompt[k] = (int32_t)json_integer_value(json_array_get(p, k));
        }
        for (size_t k = 0; k < o->n_gen; k++) {
            o->gen[k] = (int32_t)json_integer_value(json_array_get(g, k));
        }
    }
    json_decref(root);
    return n;
}

/* A gen line: greedy when temperature is 0; seed < 0: none. */
/* The same with more sampling fields (JSON members, or NULL) after the
 * temperature and seed. */
static inline void et_gen_line_s(char *out, size_t size, int64_t id, const int32_t *toks, size_t n,
                                 int64_t max_tokens, double temperature, int64_t seed,
                                 const char *sampling, const char *extra);

static inline void et_gen_line(char *out, size_t size, int64_t id, const int32_t *toks, size_t n,
                               int64_t max_tokens, double temperature, int64_t seed,
                               const char *extra)
{
    et_gen_line_s(out, size, id, toks, n, max_tokens, temperature, seed, NULL, extra);
}

static inline void et_gen_line_s(char *out, size_t size, int64_t id, const int32_t *toks, size_t n,
                                 int64_t max_tokens, double temperature, int64_t seed,
                                 const char *sampling, const char *extra)
{
    size_t k = (size_t)snprintf(out, size, "{\"op\":\"gen\",\"id\":%lld,\"tokens\":[", (long long)id);
    for (size_t i = 0; i < n && k < size; i++) {
        k += (size_t)snprintf(out + k, size - k, "%s%d", i ? "," : "", toks[i]);
    }
    if (k < size) {
        k += (size_t)snprintf(out + k, size - k, "],\"max_tokens\":%lld,\"sampling\":{"
                              "\"temperature\":%g", (long long)max_tokens, temperature);
    }
    if (seed >= 0 && k < size) k += (size_t)snprintf(out + k, size - k, ",\"seed\":%lld", (long long)seed);
    if (sampling != NULL && k < size) k += (size_t)snprintf(out + k, size - k, ",%s", sampling);
    if (k < size) snprintf(out + k, size - k, "}%s%s}\n", extra ? "," : "", extra ? extra : "");
}

/* --- driving an engine in-process, as the scheduler tests do: each line
 * and step's output goes to the collector at once --- */

/* One server -> engine line (with or without its '\n'). A line that does
 * not decode goes where the engine's reader would send it
 * (engine_handle_bad_line), so its `err` is collected too. */
static inline void et_send(engine *e, proto_buf *out, et_collect *c, const char *line)
{
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\n') len--;
    proto_msg m;
    proto_error pe;
    if (proto_decode(line, len, PROTO_DIR_TO_ENGINE, &m, &pe) != 0) {
        engine_handle_bad_line(e, pe.code, pe.has_id, pe.id, pe.message, out);
    } else {
        engine_handle(e, &m, out);
        proto_msg_free(&m);
    }
    et_collect_buf(c, out);
}

static inline void et_step(engine *e, proto_buf *out, et_collect *c)
{
    engine_step(e, out);
    et_collect_buf(c, out);
}

/* Steps until the engine has nothing left to do (bounded: a scheduler that
 * never finishes fails the test instead of hanging it). */
static inline void et_run(engine *e, proto_buf *out, et_collect *c)
{
    for (int i = 0; i < 100000 && engine_busy(e); i++) et_step(e, out, c);
    assert_false(engine_busy(e));
}

/* An engine on a model the test holds, its output buffer and collector. */
typedef struct et_fixture {
    engine *e;
    proto_buf out;
    et_collect *c;
} et_fixture;

static inline void et_open(et_fixture *f, const model *m, const engine_params *p)
{
    memset(f, 0, sizeof(*f));
    strata_err err;
    if (engine_init(&f->e, m, p, &err) != 0) fail_msg("%s", err.msg);
    f->c = et_collect_new();
}

static inline void et_close(et_fixture *f)
{
    engine_free(f->e);
    proto_buf_free(&f->out);
    et_collect_free(f->c);
}

#endif
