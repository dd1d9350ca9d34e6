/* The HTTP side (server.h): libmicrohttpd in thread-per-connection mode,
 * routing, auth, bodies, and the handlers that wait on their request.
 *
 * Threads: every handler below runs on the connection's own MHD thread. A
 * generation handler serves its HTTP request with one engine request (sreq)
 * per choice (`n`) or per embeddings input, owns one reference to each, and
 * is the only reader of their results: it waits on the waker they share in
 * 100 ms steps, checking between them whether the client closed its socket
 * (then every one is cancelled: dropped while queued, `stop` while running)
 * or whether the server is aborting. Streaming responses run the same loop
 * inside MHD's content-reader callback, which MHD calls on the same
 * connection thread. A request that arrives before any engine was ever
 * ready waits for one first (wait_first_engine). */
#define _GNU_SOURCE
#include "serve/server.h"

#include "base/clock.h"
#include "base/log.h"
#include "serve/anthropic.h"
#include "serve/api.h"
#include "serve/responses.h"
#include "serve/request.h"
#include "serve/textgen.h"
#include "text/tokenizer.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_DEFAULT_BODY_LIMIT ((size_t)8 << 20)
/* A body over the limit is read and dropped, so that the client, still
 * sending, gets its 413 rather than a broken pipe (clients that do not send
 * `Expect: 100-continue` read no answer until they have sent it all); past
 * this many bytes more, the server stops reading. */
#define HTTP_DRAIN_BYTES ((size_t)64 << 20)
#define HTTP_WAIT_STEP_MS 100
#define HTTP_KEEPALIVE_MS 15000

struct server {
    server_config cfg;
    pool *p;
    metrics m;
    struct MHD_Daemon *d;
    int port;
    bool merge_system;   /* api_env.merge_system, asked of the template once */
    atomic_int active;
    atomic_bool quiescing, aborting;
    atomic_ullong next_serial;
};

/* Per HTTP request (MHD's con_cls). */
typedef struct hctx {
    sbuf body;
    bool too_large;
    size_t n_dropped;  /* bytes of a too-large body read and dropped */
    bool counted;
} hctx;

/* --- small helpers --- */

/* CORS: a browser page at the request's Origin may read the answer when
 * the origin is allowed (--allowed-origins): the origin is echoed, as
 * llama-server does. */
static bool origin_allowed(const server *s, const char *origin)
{
    const char *list = s->cfg.allowed_origins;
    if (origin == NULL) return false;
    if (list == NULL || strcmp(list, "*") == 0) return true;
    if (strcmp(list, "none") == 0) return false;
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, origin, n) == 0) return true;
        if (end == NULL) break;
        p = end + 1;
    }
    return false;
}

static void add_cors(const server *s, struct MHD_Connection *c, struct MHD_Response *r)
{
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin_allowed(s, origin)) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Access-Control-Allow-Credentials", "true");
    MHD_add_response_header(r, "Vary", "Origin");
}


static bool client_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return true;
    if (p.revents & POLLIN) {
        char c;
        return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return false;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static enum MHD_Result respond(server *s, struct MHD_Connection *c, const char *endpoint,
                               int status, char *body, const char *ctype, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 429 || status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (allow != NULL) MHD_add_response_header(r, "Allow", allow);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    add_cors(s, c, r);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    metrics_count_request(&s->m, endpoint, status);
    return ret;
}

static enum MHD_Result respond_json(server *s, struct MHD_Connection *c, const char *endpoint,
                                    int status, json_t *j)
{
    char *body = api_dumps(j);
    json_decref(j);
    return respond(s, c, endpoint, status, body, "application/json", NULL);
}

static enum MHD_Result respond_error(server *s, struct MHD_Connection *c, const char *endpoint,
                                     const api_error *e, uint64_t serial)
{
    if (serial > 0) {
        LOG_INFO("request %llu: %s -> %d %s: %s", (unsigned long long)serial, endpoint, e->status,
                 e->code, e->message);
    }
    char *body = strncmp(endpoint, "/v1/messages", 12) == 0 ? anthropic_error_body(e) : api_error_body(e);
    return respond(s, c, endpoint, e->status, body, "application/json", NULL);
}

/* Constant-time in the key's bytes: the time depends on the key's length
 * only, never on where the given value first differs. */
static bool key_matches(const char *given, const char *key)
{
    size_t gl = strlen(given), kl = strlen(key);
    volatile unsigned char diff = (unsigned char)(gl != kl);
    for (size_t i = 0; i < kl; i++) diff |= (unsigned char)((i < gl ? given[i] : 0) ^ key[i]);
    return diff == 0;
}

static bool authorized(server *s, struct MHD_Connection *c)
{
    if (s->cfg.api_key == NULL) return true;
    /* Anthropic's clients send the key as x-api-key */
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    if (x != NULL && key_matches(x, s->cfg.api_key)) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_matches(h, s->cfg.api_key);
}

static api_env make_env(server *s)
{
    pool_info pi;
    pool_get_info(s->p, &pi);
    return (api_env){.voc = s->cfg.voc, .chat_template = s->cfg.chat_template, .bos = s->cfg.bos,
                     .eos = s->cfg.eos, .model_name = s->cfg.model_name,
                     .model_aliases = s->cfg.model_aliases, .n_model_aliases = s->cfg.n_model_aliases,
                     .n_ctx = pi.n_ctx,
                     .reasoning_off = s->cfg.reasoning_off, .merge_system = s->merge_system};
}

/* --- waiting on a request's engine requests --- */

/* The server's statuses for a refused submission. */
static void submit_error(enum pool_submit_result sr, api_error *e)
{
    if (sr == POOL_QUEUE_FULL) api_fail(e, 429, "queue_full", "the queue is full; retry later");
    else if (sr == POOL_STOPPING) api_fail(e, 503, "shutting_down", "the server is shutting down");
    else api_fail(e, 503, "no_engine", "no engine is ready");
}

/* A batch (several choices, several embeddings inputs) that was admitted
 * (its first engine request accepted) is not refused halfway for a full
 * queue: the rest are submitted as the queue takes them, and only when none
 * of its own is left to wait for, for this long, does it fail with 429. */
#define HTTP_BATCH_WAIT_MS 60000

enum pump_result { PUMP_TEXT, PUMP_IDLE, PUMP_END, PUMP_GONE };

/* One engine request of an HTTP request: choice i of a completion or chat
 * (`n` of them), or embeddings input i. Used by the handler's thread only. */
typedef struct choice {
    sreq *r;            /* the handler's reference */
    textgen tg;         /* completions and chat */
    bool tg_ready;
    size_t seen;        /* ids of r->toks taken */
    size_t lp_sent;     /* tokens whose logprobs went out (tg.toks[0..lp_sent)) */
    size_t prompt;      /* which of the request's prompts it answers */
    bool echo_lp_sent;  /* echo with logprobs: the prompt tokens' went out */
    bool echo_sent;     /* streamed echo: the prompt's text went out */
    size_t ids_sent;    /* streamed /completion: the ids of r->toks[0..ids_sent) went out */
    uint64_t prog_seen; /* return_progress: the `prog` lines of r taken */
    bool stopped_by_us; /* a stop string: `stop` sent, waiting for `done` */
    bool failed;        /* the handler failed (bad token from the engine): `stop` sent */
    char fail_msg[600];
    bool ended;         /* terminal and its text finished; res and error are set */
    bool error;         /* it ended in an error (err) */
    api_error err;
    api_result res;
    bool first;         /* streamed: none of its chunks went out (chat: role comes first) */
    bool reported;      /* streamed: its finish chunk went out */
    sbuf text;          /* streamed: text not sent yet; else all of it */
    sbuf all;           /* streamed with tools or reasoning: all the text so far */
    size_t sent;        /* ... of which the bytes sent as content */
    size_t r_sent;      /* ... and the bytes of its reasoning sent */
    bool parsed;        /* choice_parse ran */
    tool_parsed tp;     /* with tools: the calls of the finished text */
    bool tp_ready;
    reasoning_parts rp; /* with reasoning: the finished text's parts */
    bool rp_ready;
} choice;

/* The most marker tokens one request keeps as text. */
#define GEN_MAX_KEEP 16

typedef struct gen_run {
    server *s;
    api_gen g;
    api_env env;
    uint64_t serial;
    int fd;
    const char *endpoint;
    sreq_waker *w;       /* every choice's sreq signals it */
    uint64_t w_seen;
    choice *ch;
    size_t n_ch;
    size_t n_submitted;  /* ch[0..n_submitted) were handed to the pool */
    size_t n_ended;
    size_t first_open;   /* ch[0..first_open) have all ended: skipped when polling */
    int64_t blocked_since_ns; /* refused with none of ours left to wait for; 0: not */
    bool refused;        /* a submission failed for good: `refusal` */
    api_error refusal;
    int failed_choice;   /* the first choice that ended in an error; -1: none */
    int32_t keep[GEN_MAX_KEEP]; /* control tokens detokenized as text (api_keep_markers) */
    size_t n_keep;
    api_echo *echo;      /* g.echo: (g.n_prompts) each prompt's text, shared by its choices */
    bool anthropic;      /* /v1/messages: a chat request answered in Anthropic's shape */
    bool responses;      /* /v1/responses: a chat request answered in the Responses shape */
} gen_run;

/* Hands the choices not yet submitted to the pool, in order, as far as it
 * takes them (HTTP_BATCH_WAIT_MS). */
static void submit_more(gen_run *gr)
{
    while (gr->n_submitted < gr->n_ch && !gr->refused) {
        enum pool_submit_result sr = pool_submit(gr->s->p, gr->ch[gr->n_submitted].r);
        if (sr == POOL_SUBMITTED) {
            gr->n_submitted++;
            gr->blocked_since_ns = 0;
            continue;
        }
        bool outstanding = gr->n_ended < gr->n_submitted;
        /* A full queue, or no engine while ours wait in the queue for one
         * (they then fail by themselves if none comes): try again later. */
        if (gr->n_submitted > 0 && (sr == POOL_QUEUE_FULL || (sr == POOL_NO_ENGINE && outstanding))) {
            if (outstanding) return;
            int64_t now = strata_clock_ns();
            if (gr->blocked_since_ns == 0) gr->blocked_since_ns = now;
            if (now - gr->blocked_since_ns < (int64_t)HTTP_BATCH_WAIT_MS * 1000000) return;
        }
        gr->refused = true;
        submit_error(sr, &gr->refusal);
    }
}

/* The HTTP status of a request that ended in an error. An engine's `err`
 * comes with the replica's 500 and its code decides: the engine refused the
 * request itself (400: the client can fix it; a client's grammar that does
 * not parse, or that no token can continue, included) or the engine failed (503,
 * worth a retry, as when it died). A 500 stays only for the server's own
 * failures (`internal_error`: out of memory). */
static int error_status(int status, const char *code)
{
    if (strcmp(code, PROTO_ERR_CONTEXT_LENGTH) == 0 || strcmp(code, PROTO_ERR_BAD_REQUEST) == 0 ||
        strcmp(code, PROTO_ERR_LINE_TOO_LONG) == 0 || strcmp(code, PROTO_ERR_BAD_GRAMMAR) == 0 ||
        strcmp(code, PROTO_ERR_GRAMMAR_DEAD_END) == 0) {
        return 400;
    }
    if (strcmp(code, "internal_error") == 0) return 500;
    if (status < 400 || status == 500) return 503;
    return status;
}

/* A terminal choice's error (and no stop string ended it first): 0 when
 * there is none. */
static int choice_error(choice *c, api_error *e)
{
    sreq *r = c->r;
    /* The engine sent an id the server cannot turn into text: the engine's
     * failure, as an engine `err` is. */
    if (c->failed) return api_fail(e, 503, "bad_engine_output", "%s", c->fail_msg);
    pthread_mutex_lock(&r->result_lock);
    int rc = 0;
    if (r->finish == SREQ_FINISH_ERROR && !c->tg.hit_stop) {
        rc = api_fail(e, error_status(r->err_status, r->err_code),
                      r->err_code[0] ? r->err_code : "engine_error", "%s",
                      r->err_msg[0] ? r->err_msg : "the engine failed");
    }
    pthread_mutex_unlock(&r->result_lock);
    return rc;
}

/* A terminal choice's figures (and its share of the metrics). */
static void fill_result(gen_run *gr, choice *c, api_result *res)
{
    sreq *r = c->r;
    pthread_mutex_lock(&r->result_lock);
    memset(res, 0, sizeof(*res));
    res->serial = r->serial;
    res->stats = r->stats;
    res->finish_reason = c->tg.hit_stop || r->finish != SREQ_FINISH_LENGTH ? "stop" : "length";
    res->prompt_tokens = (int64_t)(r->embed ? r->emb.n_tokens : r->gen.n_tokens);
    res->cached_tokens = r->stats.cached_n;
    res->completion_tokens = c->tg.hit_stop ? (int64_t)c->tg.n_consumed
                             : r->stats.predicted_n > 0 ? r->stats.predicted_n
                                                        : (int64_t)r->n_toks;
    res->queue_ms = r->t_start_ns > 0 ? (double)(r->t_start_ns - r->t_submit_ns) / 1e6 : 0.0;
    res->ttft_ms = r->t_first_ns > 0 ? (double)(r->t_first_ns - r->t_submit_ns) / 1e6 : 0.0;
    res->replica = r->served_by;
    res->route_cached_n = r->route_cached_n;
    int64_t t_first = r->t_first_ns, t_end = r->t_end_ns, t_submit = r->t_submit_ns;
    size_t n_toks = r->n_toks;
    pthread_mutex_unlock(&r->result_lock);
    metrics *m = &gr->s->m;
    metrics_add_tokens(m, res->prompt_tokens, (int64_t)n_toks);
    metrics_add_drafts(m, res->stats.draft_n, res->stats.draft_accepted_n);
    if (t_first > 0) {
        metrics_observe_ttft(m, (double)(t_first - t_submit) / 1e9);
        if (n_toks > 1 && t_end > t_first) {
            metrics_observe_itl(m, (double)(t_end - t_first) / 1e9, (int64_t)n_toks - 1);
        }
    }
}

/* Takes a choice's new ids, turns them into text (appended to c->text), and
 * once it is terminal finishes it. True when it made visible progress (text,
 * or its end). */
static bool choice_take(gen_run *gr, size_t i)
{
    choice *c = &gr->ch[i];
    sreq *r = c->r;
    pthread_mutex_lock(&r->result_lock);
    size_t n_new = r->n_toks - c->seen;
    int32_t *ids = NULL;
    if (n_new > 0) {
        ids = malloc(n_new * sizeof(*ids));
        if (ids != NULL) memcpy(ids, r->toks + c->seen, n_new * sizeof(*ids));
        else n_new = 0;
    }
    c->seen += n_new;
    enum sreq_finish fin = r->finish;
    /* a new `prog` is progress too when the stream reports it (stream_progress) */
    bool prog_new = gr->g.stream && gr->g.progress && r->n_prog > c->prog_seen;
    pthread_mutex_unlock(&r->result_lock);
    size_t before = c->text.len;
    for (size_t k = 0; c->tg_ready && k < n_new && !c->tg.ended && !c->failed; k++) {
        strata_err err;
        if (textgen_push(&c->tg, ids[k], &c->text, &err) != 0) {
            /* The request keeps its slot until the engine's `done`. */
            c->failed = true;
            snprintf(c->fail_msg, sizeof(c->fail_msg), "cannot detokenize the output: %s", err.msg);
            LOG_ERROR("request %llu: %s; cancelling", (unsigned long long)r->serial, c->fail_msg);
            pool_cancel(gr->s->p, r);
        }
    }
    free(ids);
    if (c->tg_ready && c->tg.hit_stop && !c->stopped_by_us) {
        c->stopped_by_us = true;
        pool_cancel(gr->s->p, r);
    }
    if (fin == SREQ_FINISH_NONE) return c->text.len > before || prog_new;
    strata_err err;
    if (c->tg_ready && !c->failed) textgen_finish(&c->tg, &c->text, &err);
    c->ended = true;
    gr->n_ended++;
    fill_result(gr, c, &c->res);
    c->error = choice_error(c, &c->err) != 0;
    if (c->error && gr->failed_choice < 0) gr->failed_choice = (int)i;
    return true;
}

/* Waits up to idle_ms (0: no limit) for progress of any choice, submitting
 * the ones still waiting for the queue meanwhile. PUMP_END once every
 * choice is terminal, or one failed (the request then fails), or a
 * submission was refused for good. */
static enum pump_result pump(gen_run *gr, int idle_ms)
{
    int64_t t0 = strata_clock_ns();
    for (;;) {
        submit_more(gr);
        bool progress = false;
        for (size_t i = gr->first_open; i < gr->n_submitted; i++) {
            if (!gr->ch[i].ended && choice_take(gr, i)) progress = true;
        }
        while (gr->first_open < gr->n_submitted && gr->ch[gr->first_open].ended) gr->first_open++;
        if (gr->refused || gr->failed_choice >= 0 || gr->n_ended == gr->n_ch) return PUMP_END;
        if (progress) return PUMP_TEXT;
        if (client_gone(gr->fd) || atomic_load(&gr->s->aborting)) return PUMP_GONE;
        if (idle_ms > 0 && strata_clock_ns() - t0 >= (int64_t)idle_ms * 1000000) return PUMP_IDLE;
        sreq_waker_wait(gr->w, &gr->w_seen, HTTP_WAIT_STEP_MS);
    }
}

/* The request's error once pump ended: the refusal, or the first failed
 * choice's. 0 when it succeeded. */
static int gen_error(gen_run *gr, api_error *e)
{
    if (gr->failed_choice >= 0) {
        *e = gr->ch[gr->failed_choice].err;
        return -1;
    }
    if (gr->refused) {
        *e = gr->refusal;
        return -1;
    }
    return 0;
}

/* The logprobs of a choice's tokens that became visible since the last call
 * (textgen.h), as the choice's `logprobs` object; NULL when the request did
 * not ask for them. With none new, an object with empty lists when `always`,
 * else NULL. An echo's prompt tokens come first, once (the first with a
 * null logprob and null alternatives, as OpenAI's), and the reply's text
 * offsets count from the start of the echoed prompt; prompt_only: those
 * alone (the streamed echo's chunk). */
static json_t *take_logprobs(gen_run *gr, choice *c, bool always, bool prompt_only)
{
    if (gr->g.logprobs < 0 || !c->tg_ready) return NULL;
    size_t from = c->lp_sent, to = prompt_only ? from : c->tg.n_visible;
    const api_echo *ec = gr->g.echo ? &gr->echo[c->prompt] : NULL;
    size_t n_pre = ec != NULL && !c->echo_lp_sent ? ec->n : 0;
    if (from >= to && n_pre == 0 && !always) return NULL;
    size_t n_gen = to > from ? to - from : 0, n = n_pre + n_gen;
    api_lp_token *t = calloc(n ? n : 1, sizeof(*t));
    if (t == NULL) return NULL;
    sreq *r = c->r;
    /* The reader may grow r->lps meanwhile: copy the entries under the lock;
     * their `top` arrays never change once stored and live as long as r
     * (the prompt's all came before the first token, or the end). */
    pthread_mutex_lock(&r->result_lock);
    size_t n_ids;
    const int32_t *ids = api_gen_prompt(&gr->g, c->prompt, &n_ids);
    for (size_t i = 0; i < n_pre; i++) {
        t[i].id = ids[i];
        t[i].logprob = NAN;
        t[i].null_top = i == 0;
        if (r->plps != NULL && i > 0) {
            t[i].logprob = r->plps[i].logprob;
            t[i].top = r->plps[i].top;
            t[i].n_top = r->plps[i].n_top;
        }
    }
    for (size_t i = n_pre; i < n; i++) {
        size_t k = from + i - n_pre;
        t[i].id = k < r->n_toks ? r->toks[k] : 0;
        t[i].logprob = NAN;
        if (r->lps != NULL && k < r->n_toks) {
            t[i].logprob = r->lps[k].logprob;
            t[i].top = r->lps[k].top;
            t[i].n_top = r->lps[k].n_top;
        }
    }
    pthread_mutex_unlock(&r->result_lock);
    for (size_t i = 0; i < n_pre; i++) {
        t[i].n_bytes = ec->start[i + 1] - ec->start[i];
        t[i].bytes = ec->text + ec->start[i];
        t[i].text_offset = ec->chars[i];
    }
    size_t shift = ec != NULL ? ec->n_chars : 0;
    for (size_t i = n_pre; i < n; i++) {
        size_t k = from + i - n_pre;
        t[i].bytes = textgen_token_bytes(&c->tg, k, &t[i].n_bytes);
        t[i].text_offset = shift + c->tg.toks[k].char_start;
    }
    json_t *j = api_is_native(gr->g.kind) ? api_native_probs(&gr->env, t, n, (size_t)gr->g.logprobs)
                                         : api_logprobs(&gr->env, gr->g.kind, t, n, (size_t)gr->g.logprobs);
    free(t);
    c->lp_sent = to > from ? to : from;
    c->echo_lp_sent = true;
    return j;
}

/* vLLM's prompt_logprobs of a terminal choice (NULL when not asked). */
static json_t *take_prompt_logprobs(gen_run *gr, choice *c)
{
    if (gr->g.prompt_logprobs < 0) return NULL;
    sreq *r = c->r;
    pthread_mutex_lock(&r->result_lock); /* terminal: nothing changes them now */
    size_t n_ids;
    const int32_t *ids = api_gen_prompt(&gr->g, c->prompt, &n_ids);
    json_t *j = api_prompt_logprobs(&gr->env, ids, n_ids, r->plps, (size_t)gr->g.prompt_logprobs);
    pthread_mutex_unlock(&r->result_lock);
    return j;
}

/* The figures of the whole request (api_result_sum) from its ended
 * choices. */
static void total_result(gen_run *gr, api_result *out)
{
    api_result *rs = calloc(gr->n_ch, sizeof(*rs));
    if (rs == NULL) {
        *out = gr->ch[0].res;
        return;
    }
    for (size_t i = 0; i < gr->n_ch; i++) rs[i] = gr->ch[i].res;
    api_result_sum(rs, gr->n_ch, gr->g.kind != API_EMBEDDING ? gr->g.n_choices : 1, out);
    free(rs);
}

static void gen_run_free(gen_run *gr)
{
    /* the open choices are cancelled together (pool_cancel_all: a slot one
     * frees never starts another); each keeps its slot until `done` */
    sreq **open = calloc(gr->n_ch > 0 ? gr->n_ch : 1, sizeof(*open));
    for (size_t i = 0; i < gr->n_ch; i++) {
        choice *c = &gr->ch[i];
        if (c->r == NULL || i >= gr->n_submitted) continue;
        if (open != NULL) open[i] = c->r;
        else pool_cancel(gr->s->p, c->r);
    }
    if (open != NULL) {
        pool_cancel_all(gr->s->p, open, gr->n_ch);
        free(open);
    }
    for (size_t i = 0; i < gr->n_ch; i++) {
        choice *c = &gr->ch[i];
        sreq_release(c->r);
        if (c->tg_ready) textgen_free(&c->tg);
        sbuf_free(&c->text);
        sbuf_free(&c->all);
        if (c->tp_ready) tool_parsed_free(&c->tp);
        if (c->rp_ready) reasoning_parts_free(&c->rp);
    }
    free(gr->ch);
    sreq_waker_release(gr->w);
    for (size_t p = 0; gr->echo != NULL && p < gr->g.n_prompts; p++) api_echo_free(&gr->echo[p]);
    free(gr->echo);
    api_gen_free(&gr->g);
    free(gr);
}

/* Sets up one engine request per choice (or embeddings input), all
 * signalling gr->w. 0, or -1 (out of memory, or a prompt the detokenizer
 * cannot take). */
static int gen_run_prepare(gen_run *gr)
{
    bool embed = gr->g.kind == API_EMBEDDING;
    size_t n = api_gen_n_requests(&gr->g);
    if (!embed) gr->n_keep = api_keep_markers(gr->s->cfg.voc, &gr->g, gr->keep, GEN_MAX_KEEP);
    if (gr->g.echo) {
        gr->echo = calloc(gr->g.n_prompts, sizeof(*gr->echo));
        if (gr->echo == NULL) return -1;
        for (size_t p = 0; p < gr->g.n_prompts; p++) {
            size_t n_ids;
            const int32_t *ids = api_gen_prompt(&gr->g, p, &n_ids);
            if (api_echo_make(gr->s->cfg.voc, ids, n_ids, gr->g.keep_special, &gr->echo[p]) != 0) return -1;
        }
    }
    gr->w = sreq_waker_new();
    gr->ch = calloc(n ? n : 1, sizeof(*gr->ch));
    if (gr->w == NULL || gr->ch == NULL) return -1;
    gr->n_ch = n;
    for (size_t i = 0; i < n; i++) {
        choice *c = &gr->ch[i];
        c->first = true;
        c->r = sreq_new(gr->serial, embed);
        if (c->r == NULL) return -1;
        sreq_set_waker(c->r, gr->w);
        if (api_gen_copy_to(&gr->g, i, c->r) != 0) return -1;
        if (embed) continue;
        strata_err err;
        c->prompt = i / gr->g.n_choices;
        size_t n_ids;
        const int32_t *ids = api_gen_prompt(&gr->g, c->prompt, &n_ids);
        if (textgen_init(&c->tg, gr->s->cfg.voc, ids, n_ids,
                         (const char *const *)gr->g.stops, gr->g.n_stops, &err) != 0) {
            textgen_free(&c->tg);
            return -1;
        }
        textgen_keep(&c->tg, gr->keep, gr->n_keep);
        if (gr->g.keep_special) textgen_render_special(&c->tg);
        textgen_stop_on(&c->tg, gr->g.stop_ids, gr->g.n_stop_ids, gr->g.include_stop,
                        (size_t)gr->g.min_tokens);
        c->tg_ready = true;
    }
    return 0;
}

/* --- streaming --- */

typedef struct stream_st {
    gen_run *gr;
    sbuf out;
    size_t off;
    bool finished;
    anthropic_stream ast; /* gr->anthropic: the events' state */
    responses_stream rst; /* gr->responses: likewise */
} stream_st;

/* The stop string that ended choice 0 (Anthropic's stop_sequence), or NULL. */
static const char *stop_sequence(const gen_run *gr)
{
    const choice *c = &gr->ch[0];
    return c->tg_ready && c->tg.hit_stop && c->tg.stop_hit >= 0 ? gr->g.stops[c->tg.stop_hit] : NULL;
}

/* One streamed chunk (stolen) as an SSE event, or as the Anthropic events
 * it makes. */
static void sse(stream_st *st, json_t *j)
{
    gen_run *gr = st->gr;
    if (gr->responses) {
        responses_stream_chunk(&st->rst, j, gr->serial, gr->env.model_name, &st->out);
        json_decref(j);
        return;
    }
    if (!gr->anthropic) {
        api_sse_event(&st->out, j);
        return;
    }
    st->ast.input_tokens = (int64_t)gr->g.n_prompt;
    anthropic_stream_chunk(&st->ast, j, gr->serial, gr->env.model_name, stop_sequence(gr), &st->out);
    json_decref(j);
}

/* Parses a finished choice's text once: its reasoning split off (when the
 * request splits it), then what is left for tool calls (when it is parsed
 * for calls: harmony's calls come from the split); with calls its
 * finish_reason becomes "tool_calls". Out of memory, the text stays
 * whole content. */
static void choice_parse(gen_run *gr, choice *c, const char *text, size_t n)
{
    if (c->parsed) return;
    c->parsed = true;
    const char *ct = text ? text : "";
    size_t cn = text ? n : 0;
    if (gr->g.reasoning != REASONING_NONE &&
        reasoning_split(gr->g.reasoning, gr->g.reasoning_open, ct, cn, true, &c->rp) == 0) {
        c->rp_ready = true;
        ct = c->rp.content;
        cn = c->rp.n_content;
    }
    if (!gr->g.tool_calls) return;
    if (gr->g.tool_fmt == TOOL_FORMAT_HARMONY || gr->g.tool_fmt == TOOL_FORMAT_RECIPIENTS) {
        if (!c->rp_ready) return;
        /* (a copy of n bytes: the text may hold a NUL) */
        c->tp = (tool_parsed){.content = malloc(cn + 1), .n_content = cn, .calls = c->rp.calls,
                              .n_calls = c->rp.n_calls};
        c->rp.calls = NULL;
        c->rp.n_calls = 0;
        if (c->tp.content == NULL) {
            tool_parsed_free(&c->tp);
            return;
        }
        memcpy(c->tp.content, ct, cn);
        c->tp.content[cn] = '\0';
    } else if (tool_calls_parse_typed(gr->g.tool_fmt, ct, cn, gr->g.tools, &c->tp) != 0) {
        return;
    }
    c->tp_ready = true;
    if (c->tp.n_calls > 0) c->res.finish_reason = "tool_calls";
}

/* The events of streamed choice i when its output is parsed (for calls,
 * reasoning or both): the settled reasoning as reasoning_content deltas;
 * content only up to what cannot be (the start of) a call, and once it
 * ends either the rest as content or the calls as tool_calls deltas (the
 * first of each with its id and name, then its arguments), then the finish
 * chunk. lp (stolen) rides on the content chunk. */
static void stream_parsed_choice(stream_st *st, size_t i, json_t *lp)
{
    gen_run *gr = st->gr;
    choice *c = &gr->ch[i];
    if (c->text.len > 0) sbuf_append(&c->all, c->text.data, c->text.len);
    c->text.len = 0;
    if (c->text.data != NULL) c->text.data[0] = '\0';
    const char *all = c->all.data ? c->all.data : "";
    if (c->ended) choice_parse(gr, c, all, c->all.len);
    /* the content so far: all the text, or what the reasoning split settled */
    const char *ct = all;
    size_t cn = c->all.len;
    reasoning_parts cur = {0};
    bool have_cur = false;
    if (gr->g.reasoning != REASONING_NONE) {
        const reasoning_parts *rp = NULL;
        if (c->ended) {
            rp = c->rp_ready ? &c->rp : NULL;
        } else if (reasoning_split(gr->g.reasoning, gr->g.reasoning_open, all, c->all.len, false,
                                   &cur) == 0) {
            have_cur = true;
            rp = &cur;
        } else {
            cn = c->sent; /* out of memory: nothing new this time */
        }
        if (rp != NULL) {
            if (rp->n_reasoning > c->r_sent) {
                sse(st, api_stream_reasoning(&gr->env, gr->serial, i,
                                                             rp->reasoning + c->r_sent,
                                                             rp->n_reasoning - c->r_sent, c->first));
                c->first = false;
                c->r_sent = rp->n_reasoning;
            }
            ct = rp->content;
            cn = rp->n_content;
        }
    }
    const char *from = ct + c->sent;
    size_t n_send = 0;
    bool calls = c->tp_ready && c->tp.n_calls > 0;
    if (calls) {
        /* the content is the text before the first call (all of which was
         * held from where the call began) and any text after the last */
        if (c->tp.n_content > c->sent) {
            from = c->tp.content + c->sent;
            n_send = c->tp.n_content - c->sent;
        }
    } else {
        size_t upto = c->ended || !gr->g.tool_calls ? cn : tool_calls_text_prefix(gr->g.tool_fmt, ct, cn);
        if (upto > c->sent) n_send = upto - c->sent;
    }
    if (n_send > 0 || lp != NULL) {
        sse(st, api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i, from, n_send,
                                                 NULL, c->first, lp));
        c->first = false;
        c->sent += n_send;
    }
    if (have_cur) reasoning_parts_free(&cur);
    if (!c->ended || c->reported) return;
    for (size_t k = 0; calls && k < c->tp.n_calls; k++) {
        json_t *d = api_stream_tool_delta(&gr->env, gr->serial, i, k, c->tp.calls[k].name, NULL);
        if (c->first) {
            json_t *delta = json_object_get(json_array_get(json_object_get(d, "choices"), 0), "delta");
            json_object_set_new(delta, "role", json_string("assistant"));
            c->first = false;
        }
        sse(st, d);
        sse(st, api_stream_tool_delta(&gr->env, gr->serial, i, k, NULL,
                                                      c->tp.calls[k].arguments));
    }
    json_t *last = api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i, "", 0, c->res.finish_reason,
                                    c->first, NULL);
    json_object_set_new(last, "timings", api_timings(&c->res));
    sse(st, last);
    c->first = false;
    c->reported = true;
}

/* Copies r->toks[from, to) (to capped at the ids r has) into a malloc'd
 * array of *n; NULL when none (or out of memory). */
static int32_t *copy_toks(sreq *r, size_t from, size_t to, size_t *n)
{
    pthread_mutex_lock(&r->result_lock);
    if (to > r->n_toks) to = r->n_toks;
    *n = to > from ? to - from : 0;
    int32_t *ids = *n > 0 ? malloc(*n * sizeof(*ids)) : NULL;
    if (ids != NULL) memcpy(ids, r->toks + from, *n * sizeof(*ids));
    else *n = 0;
    pthread_mutex_unlock(&r->result_lock);
    return ids;
}

/* A finished choice as llama-server's /completion shows it (its ids with
 * return_tokens, or streamed: those of the text not yet sent). */
static json_t *native_body(gen_run *gr, choice *c, size_t index, bool streamed)
{
    size_t n_ids = 0, upto = c->tg.hit_stop ? c->tg.n_consumed : SIZE_MAX;
    int32_t *ids = NULL;
    if (gr->g.return_tokens && !streamed) ids = copy_toks(c->r, 0, upto, &n_ids);
    size_t n_prompt;
    const int32_t *prompt = api_gen_prompt(&gr->g, c->prompt, &n_prompt);
    bool word = c->tg.hit_stop && c->tg.stop_hit >= 0;
    api_native_choice nc = {
        .text = streamed ? "" : c->text.data ? c->text.data : "", .n_text = streamed ? 0 : c->text.len,
        .ids = ids, .n_ids = n_ids, .probs = streamed ? NULL : take_logprobs(gr, c, true, false),
        .res = &c->res,
        .stop_type = strcmp(c->res.finish_reason, "length") == 0 ? "limit" : word ? "word" : "eos",
        .stopping_word = word ? gr->g.stops[c->tg.stop_hit] : "", .prompt = prompt, .n_prompt = n_prompt};
    json_t *j = api_native_body(&gr->env, &gr->g, index, &nc);
    json_decref(nc.probs);
    free(ids);
    return j;
}

/* One choice's events of a streamed /completion: its text as it comes,
 * with the ids (and probabilities) of the tokens whose text begins there,
 * then once it ends the whole response object with empty content. */
static void stream_native_choice(stream_st *st, size_t i, bool failed)
{
    gen_run *gr = st->gr;
    choice *c = &gr->ch[i];
    json_t *lp = take_logprobs(gr, c, false, false);
    size_t n_ids = 0;
    int32_t *ids = copy_toks(c->r, c->ids_sent, c->tg.n_visible, &n_ids);
    if (c->text.len > 0 || n_ids > 0 || lp != NULL) {
        sse(st, api_native_chunk(i, c->text.data, c->text.len, ids, n_ids,
                                                 (int64_t)c->seen, (int64_t)c->r->gen.n_tokens, lp));
        c->ids_sent += n_ids;
    } else {
        json_decref(lp);
    }
    free(ids);
    c->text.len = 0;
    if (c->text.data != NULL) c->text.data[0] = '\0';
    if (c->ended && !c->reported && !failed) {
        sse(st, native_body(gr, c, i, true));
        c->reported = true;
    }
}

/* return_progress: a chunk with the prompt's progress (llama-server's
 * `prompt_progress`: total, cache, processed, time_ms) when the engine
 * said more since the last one. */
static void stream_progress(stream_st *st, size_t i)
{
    gen_run *gr = st->gr;
    choice *c = &gr->ch[i];
    sreq *r = c->r;
    pthread_mutex_lock(&r->result_lock);
    bool fresh = r->n_prog > c->prog_seen;
    proto_prog p = r->prog;
    c->prog_seen = r->n_prog;
    pthread_mutex_unlock(&r->result_lock);
    if (!fresh) return;
    json_t *j = api_is_native(gr->g.kind)
                    ? api_native_chunk(i, "", 0, NULL, 0, 0, (int64_t)r->gen.n_tokens, NULL)
                    : api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i, "", 0, NULL, c->first, NULL);
    if (j == NULL) return;
    json_object_set_new(j, "prompt_progress",
                        json_pack("{s:I,s:I,s:I,s:f}", "total", (json_int_t)p.total, "cache", (json_int_t)p.cached,
                                  "processed", (json_int_t)p.processed, "time_ms", p.ms));
    c->first = false;
    sse(st, j);
}

/* Produces the next SSE events into st->out; false when the client left.
 * Each choice's chunks carry its index, in the order its text comes; each
 * choice gets its finish chunk (with its own timings) when it ends. */
static bool stream_produce(stream_st *st)
{
    gen_run *gr = st->gr;
    enum pump_result k = pump(gr, HTTP_KEEPALIVE_MS);
    if (k == PUMP_GONE) {
        LOG_INFO("request %llu: client gone during the stream; cancelling",
                 (unsigned long long)gr->serial);
        return false;
    }
    if (k == PUMP_IDLE) {
        sbuf_append(&st->out, ": keep-alive\n\n", 14);
        return true;
    }
    api_error e;
    bool failed = gen_error(gr, &e) != 0;
    for (size_t i = 0; i < gr->n_submitted; i++) {
        choice *c = &gr->ch[i];
        if (gr->g.progress && !failed) stream_progress(st, i);
        if (api_is_native(gr->g.kind)) {
            stream_native_choice(st, i, failed);
            continue;
        }
        if (gr->g.echo && !c->echo_sent && !failed && (c->seen > 0 || c->ended)) {
            /* the prompt first, once its logprobs are all in (they come
             * before the first token) */
            const api_echo *ec = &gr->echo[c->prompt];
            sse(st, api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i, ec->text,
                                                     ec->n_text, NULL, c->first,
                                                     take_logprobs(gr, c, false, true)));
            c->first = false;
            c->echo_sent = true;
        }
        json_t *lp = gr->g.echo && !c->echo_sent ? NULL : take_logprobs(gr, c, false, false);
        if ((gr->g.tool_calls || gr->g.reasoning != REASONING_NONE) && !failed) {
            stream_parsed_choice(st, i, lp);
            continue;
        }
        if (c->text.len > 0 || lp != NULL) {
            sse(st, api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i,
                                                     c->text.data, c->text.len, NULL, c->first,
                                                     lp));
            c->first = false;
        }
        c->text.len = 0;
        if (c->text.data != NULL) c->text.data[0] = '\0';
        if (c->ended && !c->reported && !failed) {
            json_t *last = api_stream_chunk(&gr->env, gr->g.kind, gr->serial, i, "", 0,
                                            c->res.finish_reason, c->first, NULL);
            json_object_set_new(last, "timings", api_timings(&c->res));
            sse(st, last);
            c->first = false;
            c->reported = true;
        }
    }
    if (k != PUMP_END) return true;
    if (failed) {
        LOG_INFO("request %llu: error after the stream began: %s", (unsigned long long)gr->serial,
                 e.message);
        if (gr->anthropic) {
            char *body = anthropic_error_body(&e);
            sbuf_printf(&st->out, "event: error\ndata: %s\n\n", body ? body : "{}");
            free(body);
        } else {
            char *body = api_error_body(&e);
            sbuf_printf(&st->out, "data: %s\n\n", body ? body : "{}");
            free(body);
        }
    } else {
        api_result total;
        total_result(gr, &total);
        if (gr->g.include_usage && !api_is_native(gr->g.kind)) {
            json_t *u = api_stream_chunk(&gr->env, gr->g.kind, gr->serial, 0, "", 0, NULL, false,
                                         NULL);
            json_object_set_new(u, "choices", json_array());
            json_object_set_new(u, "usage", api_usage(&total));
            json_object_set_new(u, "timings", api_timings(&total));
            sse(st, u);
        }
        LOG_INFO("request %llu: %s done (%s, %lld+%lld tokens, %zu choice(s), replica %d)",
                 (unsigned long long)gr->serial, gr->endpoint, total.finish_reason,
                 (long long)total.prompt_tokens, (long long)total.completion_tokens, gr->n_ch,
                 total.replica);
    }
    /* (llama-server's /completion ends with its last object) */
    if (!api_is_native(gr->g.kind) && !gr->anthropic && !gr->responses) {
        sbuf_append(&st->out, "data: [DONE]\n\n", 14);
    }
    st->finished = true;
    return true;
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_st *st = cls;
    for (;;) {
        if (st->off < st->out.len) {
            size_t n = st->out.len - st->off;
            if (n > max) n = max;
            memcpy(buf, st->out.data + st->off, n);
            st->off += n;
            if (st->off == st->out.len) st->off = st->out.len = 0;
            return (ssize_t)n;
        }
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_produce(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls)
{
    stream_st *st = cls;
    gen_run_free(st->gr); /* cancels the request if it is still running */
    responses_stream_free(&st->rst);
    sbuf_free(&st->out);
    free(st);
}

/* --- handlers --- */

/* Before any engine was ever ready the context is unknown and the request
 * cannot be checked: it waits, as requests wait in the queue during a
 * restart (pool.h's bounds), checking its client meanwhile. 0 when an engine
 * has been ready (gr->env is then refreshed); else the error, or 1 when the
 * client left. */
static int wait_first_engine(gen_run *gr, api_error *e)
{
    server *s = gr->s;
    int64_t since = strata_clock_ns();
    LOG_INFO("request %llu: waiting for a first engine to be ready", (unsigned long long)gr->serial);
    for (;;) {
        int w = pool_wait_ever_ready(s->p, since, HTTP_WAIT_STEP_MS);
        if (w == POOL_SUBMITTED) break;
        if (w == POOL_NO_ENGINE) {
            api_fail(e, 503, "no_engine", "no engine is ready: every replica keeps failing to start");
            return -1;
        }
        if (w == -2) {
            api_fail(e, 503, "no_engine", "no engine became ready in time");
            return -1;
        }
        if (w >= 0) {
            submit_error((enum pool_submit_result)w, e);
            return -1;
        }
        if (atomic_load(&s->quiescing)) {
            api_fail(e, 503, "shutting_down", "the server is shutting down");
            return -1;
        }
        if (client_gone(gr->fd) || atomic_load(&s->aborting)) return 1;
    }
    gr->env = make_env(s);
    if (gr->env.n_ctx == 0) {
        api_fail(e, 503, "no_engine", "no engine is ready");
        return -1;
    }
    return 0;
}

enum gen_shape { SHAPE_OWN, SHAPE_ANTHROPIC, SHAPE_RESPONSES };

static enum MHD_Result handle_gen(server *s, struct MHD_Connection *c, const char *endpoint,
                                  enum api_kind kind, hctx *h, enum gen_shape shape)
{
    uint64_t serial = atomic_fetch_add(&s->next_serial, 1) + 1;
    api_error e;
    if (atomic_load(&s->quiescing)) {
        api_fail(&e, 503, "shutting_down", "the server is shutting down");
        return respond_error(s, c, endpoint, &e, serial);
    }
    gen_run *gr = calloc(1, sizeof(*gr));
    if (gr == NULL) return MHD_NO;
    gr->s = s;
    gr->endpoint = endpoint;
    gr->serial = serial;
    gr->anthropic = shape == SHAPE_ANTHROPIC;
    gr->responses = shape == SHAPE_RESPONSES;
    gr->failed_choice = -1;
    gr->env = make_env(s);
    gr->fd = conn_fd(c);
    if (gr->env.n_ctx == 0) {
        /* A body that is bad whatever the context (checks of the context
         * are skipped while it is unknown) is answered before any wait. */
        if (api_parse_gen(&gr->env, kind, h->body.data ? h->body.data : "", h->body.len, &gr->g,
                          &e) != 0) {
            free(gr);
            return respond_error(s, c, endpoint, &e, serial);
        }
        api_gen_free(&gr->g);
        int w = wait_first_engine(gr, &e);
        if (w != 0) {
            free(gr);
            if (w < 0) return respond_error(s, c, endpoint, &e, serial);
            LOG_INFO("request %llu: client gone before any engine was ready",
                     (unsigned long long)serial);
            metrics_count_request(&s->m, endpoint, 499);
            return MHD_NO;
        }
    }
    if (api_parse_gen(&gr->env, kind, h->body.data ? h->body.data : "", h->body.len, &gr->g, &e) != 0) {
        free(gr);
        return respond_error(s, c, endpoint, &e, serial);
    }
    /* answers name the model as it was asked for (an alias), as vLLM and
     * llama-server do */
    if (gr->g.model != NULL) gr->env.model_name = gr->g.model;
    if (gen_run_prepare(gr) != 0) {
        gen_run_free(gr);
        api_fail(&e, 500, "internal_error", "cannot set the request up");
        return respond_error(s, c, endpoint, &e, serial);
    }
    if (kind == API_EMBEDDING) {
        size_t n_tokens = 0;
        for (size_t i = 0; i < gr->g.n_inputs; i++) n_tokens += gr->g.inputs[i].n;
        LOG_INFO("request %llu: %s, %zu input(s), %zu tokens", (unsigned long long)serial, endpoint,
                 gr->n_ch, n_tokens);
    } else {
        LOG_INFO("request %llu: %s, %zu prompt tokens, max_tokens %lld, %zu choice(s)%s",
                 (unsigned long long)serial, endpoint, gr->g.n_prompt, (long long)gr->g.max_tokens,
                 gr->n_ch, gr->g.stream ? ", streamed" : "");
    }
    submit_more(gr);
    if (gr->n_submitted == 0) {
        e = gr->refusal;
        gen_run_free(gr);
        return respond_error(s, c, endpoint, &e, serial);
    }
    if (gr->g.stream && kind != API_EMBEDDING) {
        stream_st *st = calloc(1, sizeof(*st));
        struct MHD_Response *resp =
            st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_cb, st,
                                                   stream_free)
               : NULL;
        if (resp == NULL) {
            free(st);
            gen_run_free(gr);
            return MHD_NO;
        }
        st->gr = gr;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_cors(s, c, resp);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        metrics_count_request(&s->m, endpoint, 200);
        return ret;
    }
    enum pump_result k;
    while ((k = pump(gr, 0)) != PUMP_END && k != PUMP_GONE) {
    }
    enum MHD_Result ret;
    if (k == PUMP_GONE) {
        LOG_INFO("request %llu: client gone before the answer; cancelling",
                 (unsigned long long)serial);
        metrics_count_request(&s->m, endpoint, 499);
        ret = MHD_NO;
    } else if (gen_error(gr, &e) != 0) {
        ret = respond_error(s, c, endpoint, &e, serial);
    } else {
        bool parse = gr->g.tool_calls || gr->g.reasoning != REASONING_NONE;
        for (size_t i = 0; parse && i < gr->n_ch; i++) {
            choice *ch = &gr->ch[i];
            choice_parse(gr, ch, ch->text.data, ch->text.len);
        }
        api_result total;
        total_result(gr, &total);
        json_t *body = NULL;
        sbuf *echoed = NULL;
        if (gr->g.echo) echoed = calloc(gr->n_ch, sizeof(*echoed));
        if (gr->g.echo && echoed == NULL) {
            /* out of memory: answered below */
        } else if (api_is_native(kind)) {
            /* one object, or an array for several prompts or choices */
            body = gr->n_ch == 1 ? native_body(gr, &gr->ch[0], 0, false) : json_array();
            for (size_t i = 0; gr->n_ch > 1 && body != NULL && i < gr->n_ch; i++) {
                json_t *one = native_body(gr, &gr->ch[i], i, false);
                if (one == NULL || json_array_append_new(body, one) != 0) {
                    json_decref(body);
                    body = NULL;
                }
            }
        } else if (kind == API_EMBEDDING) {
            api_vec *vecs = calloc(gr->n_ch, sizeof(*vecs));
            for (size_t i = 0; vecs != NULL && i < gr->n_ch; i++) {
                /* terminal: the reader writes the vector no more */
                sreq *r = gr->ch[i].r;
                pthread_mutex_lock(&r->result_lock);
                vecs[i] = (api_vec){r->vec, r->n_vec};
                pthread_mutex_unlock(&r->result_lock);
            }
            if (vecs != NULL) body = api_embedding_body(&gr->env, &total, vecs, gr->n_ch, gr->g.base64);
            free(vecs);
        } else {
            api_choice *chs = calloc(gr->n_ch, sizeof(*chs));
            for (size_t i = 0; chs != NULL && i < gr->n_ch; i++) {
                choice *ch = &gr->ch[i];
                if (echoed != NULL) {
                    /* the prompt's text, then the reply's */
                    sbuf_append(&echoed[i], gr->echo[ch->prompt].text, gr->echo[ch->prompt].n_text);
                    sbuf_append(&echoed[i], ch->text.data ? ch->text.data : "", ch->text.len);
                    sbuf_free(&ch->text);
                    ch->text = echoed[i];
                    echoed[i] = (sbuf){0};
                }
                if (parse) choice_parse(gr, ch, ch->text.data, ch->text.len);
                chs[i] = (api_choice){.text = ch->rp_ready ? ch->rp.content
                                              : ch->text.data ? ch->text.data : "",
                                      .tools = ch->tp_ready ? &ch->tp : NULL,
                                      .n_text = ch->rp_ready ? ch->rp.n_content : ch->text.len,
                                      .reasoning = ch->rp_ready ? ch->rp.reasoning : NULL,
                                      .n_reasoning = ch->rp_ready ? ch->rp.n_reasoning : 0,
                                      .logprobs = take_logprobs(gr, ch, true, false),
                                      .prompt_logprobs = take_prompt_logprobs(gr, ch),
                                      .res = &ch->res};
            }
            if (chs != NULL) body = api_completion_body_n(&gr->env, kind, serial, chs, gr->n_ch, &total);
            if (body != NULL && gr->anthropic) {
                json_t *a = anthropic_response(body, serial, stop_sequence(gr));
                json_decref(body);
                body = a;
            } else if (body != NULL && gr->responses) {
                json_t *a = responses_response(body, serial);
                json_decref(body);
                body = a;
            }
            free(chs);
        }
        free(echoed);
        LOG_INFO("request %llu: %s -> 200 (%s, %lld+%lld tokens, %zu engine request(s), replica %d)",
                 (unsigned long long)serial, endpoint, total.finish_reason,
                 (long long)total.prompt_tokens, (long long)total.completion_tokens, gr->n_ch,
                 total.replica);
        if (body == NULL) {
            api_fail(&e, 500, "internal_error", "out of memory");
            ret = respond_error(s, c, endpoint, &e, serial);
        } else {
            ret = respond_json(s, c, endpoint, 200, body);
        }
    }
    gen_run_free(gr);
    return ret;
}

/* POST /v1/messages (Anthropic's Messages API): the body as a chat
 * request, answered in Anthropic's shape (anthropic.h); count_only:
 * /v1/messages/count_tokens, {"input_tokens"} of the rendered prompt. */
static enum MHD_Result handle_messages(server *s, struct MHD_Connection *c, const char *endpoint, hctx *h,
                                       bool count_only)
{
    api_error e;
    char *chat = NULL;
    if (anthropic_to_chat(h->body.data ? h->body.data : "", h->body.len, count_only, &chat, &e) != 0) {
        return respond_error(s, c, endpoint, &e, 0);
    }
    if (count_only) {
        api_env env = make_env(s);
        api_gen g;
        if (api_parse_gen(&env, API_CHAT, chat, strlen(chat), &g, &e) != 0) {
            free(chat);
            return respond_error(s, c, endpoint, &e, 0);
        }
        free(chat);
        json_t *out = json_pack("{s:I}", "input_tokens", (json_int_t)g.n_prompt);
        api_gen_free(&g);
        return respond_json(s, c, endpoint, 200, out);
    }
    sbuf_free(&h->body);
    h->body = (sbuf){.data = chat, .len = strlen(chat), .cap = strlen(chat) + 1};
    return handle_gen(s, c, endpoint, API_CHAT, h, SHAPE_ANTHROPIC);
}

/* POST /v1/responses (OpenAI's Responses API): the body as a chat request,
 * answered in the Responses shape (responses.h). */
static enum MHD_Result handle_responses(server *s, struct MHD_Connection *c, const char *endpoint, hctx *h)
{
    api_error e;
    char *chat = NULL;
    if (responses_to_chat(h->body.data ? h->body.data : "", h->body.len, &chat, &e) != 0) {
        return respond_error(s, c, endpoint, &e, 0);
    }
    sbuf_free(&h->body);
    h->body = (sbuf){.data = chat, .len = strlen(chat), .cap = strlen(chat) + 1};
    return handle_gen(s, c, endpoint, API_CHAT, h, SHAPE_RESPONSES);
}

/* POST /apply-template (llama-server's): a chat body's messages (and
 * tools, template switches) rendered by the chat template, as {"prompt"},
 * without generating. */
static enum MHD_Result handle_apply_template(server *s, struct MHD_Connection *c, hctx *h)
{
    const char *endpoint = "/apply-template";
    api_env env = make_env(s);
    api_gen g;
    api_error e;
    if (api_parse_gen(&env, API_CHAT, h->body.data ? h->body.data : "", h->body.len, &g, &e) != 0) {
        return respond_error(s, c, endpoint, &e, 0);
    }
    json_t *out = json_pack("{s:o}", "prompt", api_text_json(g.rendered, g.n_rendered));
    api_gen_free(&g);
    if (out == NULL) {
        api_fail(&e, 500, "server_error", "out of memory");
        return respond_error(s, c, endpoint, &e, 0);
    }
    return respond_json(s, c, endpoint, 200, out);
}

/* vLLM's /tokenize: {"prompt"} (with add_special_tokens, default true) or
 * {"messages"} (the chat template applied, as a chat request renders it)
 * into {"count", "max_model_len", "tokens"} and, with return_token_strs,
 * each token's text. */
static enum MHD_Result tokenize_vllm(server *s, struct MHD_Connection *c, hctx *h, json_t *o)
{
    const char *endpoint = "/tokenize";
    api_error e;
    api_env env = make_env(s);
    json_t *prompt = json_object_get(o, "prompt");
    json_t *ret_strs = json_object_get(o, "return_token_strs");
    int32_t *ids = NULL;
    size_t n = 0;
    api_gen g = {0};
    bool have_g = false;
    if (json_is_string(prompt)) {
        json_t *add = json_object_get(o, "add_special_tokens");
        strata_err err;
        if (tok_tokenize_alloc(s->cfg.voc, json_string_value(prompt), json_string_length(prompt),
                               add == NULL || json_is_true(add), true, &ids, &n, &err) != 0) {
            api_fail(&e, 400, "invalid_value", "cannot tokenize: %s", err.msg);
            json_decref(o);
            return respond_error(s, c, endpoint, &e, 0);
        }
    } else {
        /* messages: rendered and tokenized as the chat endpoint does */
        env.n_ctx = 0; /* a count, not a request: no context check */
        if (api_parse_gen(&env, API_CHAT, h->body.data, h->body.len, &g, &e) != 0) {
            json_decref(o);
            return respond_error(s, c, endpoint, &e, 0);
        }
        have_g = true;
        ids = g.prompt;
        n = g.n_prompt;
    }
    json_t *toks = json_array(), *strs = json_is_true(ret_strs) ? json_array() : NULL;
    char *piece = strs != NULL ? malloc(TOK_MAX_PIECE_BYTES) : NULL;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(toks, json_integer(ids[i]));
        size_t np = 0;
        if (piece != NULL && tok_token_to_piece(s->cfg.voc, ids[i], true, piece, TOK_MAX_PIECE_BYTES, &np, NULL) == 0) {
            json_array_append_new(strs, api_text_json(piece, np));
        }
    }
    free(piece);
    pool_info pi;
    pool_get_info(s->p, &pi);
    json_t *out = json_pack("{s:I,s:I,s:o}", "count", (json_int_t)n, "max_model_len", (json_int_t)pi.n_ctx, "tokens",
                            toks);
    if (out != NULL && strs != NULL) json_object_set_new(out, "token_strs", strs);
    else json_decref(strs);
    if (have_g) api_gen_free(&g);
    else free(ids);
    json_decref(o);
    if (out == NULL) {
        api_fail(&e, 500, "server_error", "out of memory");
        return respond_error(s, c, endpoint, &e, 0);
    }
    return respond_json(s, c, endpoint, 200, out);
}

static enum MHD_Result handle_tokenize(server *s, struct MHD_Connection *c, hctx *h, bool detok)
{
    const char *endpoint = detok ? "/detokenize" : "/tokenize";
    api_error e = {.status = 0};
    json_error_t je;
    json_t *o = json_loadb(h->body.data ? h->body.data : "", h->body.len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        api_fail(&e, 400, "invalid_json", "the body must be a JSON object");
        return respond_error(s, c, endpoint, &e, 0);
    }
    /* vLLM's fields rather than llama-server's `content` */
    if (!detok && json_object_get(o, "content") == NULL &&
        (json_object_get(o, "prompt") != NULL || json_object_get(o, "messages") != NULL)) {
        return tokenize_vllm(s, c, h, o);
    }
    strata_err err;
    json_t *out = NULL;
    if (!detok) {
        json_t *content = json_object_get(o, "content");
        bool add_special = json_is_true(json_object_get(o, "add_special"));
        json_t *wp = json_object_get(o, "with_pieces");
        bool pieces = json_is_true(wp);
        if (!json_is_string(content)) {
            api_fail(&e, 400, "invalid_type", "`content` must be a string");
        } else if (wp != NULL && !json_is_boolean(wp) && !json_is_null(wp)) {
            api_fail(&e, 400, "invalid_type", "`with_pieces` must be true or false");
        } else {
            int32_t *ids;
            size_t n;
            if (tok_tokenize_alloc(s->cfg.voc, json_string_value(content), json_string_length(content),
                                   add_special, true, &ids, &n, &err) != 0) {
                api_fail(&e, 400, "invalid_value", "cannot tokenize: %s", err.msg);
            } else {
                json_t *a = json_array();
                char *piece = pieces ? malloc(TOK_MAX_PIECE_BYTES) : NULL;
                for (size_t i = 0; i < n; i++) {
                    size_t np = 0;
                    /* with_pieces (llama-server's): each id with its text, or
                     * its bytes when they are not UTF-8 */
                    json_t *p = NULL;
                    if (piece != NULL &&
                        tok_token_to_piece(s->cfg.voc, ids[i], true, piece, TOK_MAX_PIECE_BYTES, &np, NULL) == 0) {
                        p = json_stringn(piece, np);
                        if (p == NULL) {
                            p = json_array();
                            for (size_t k = 0; k < np; k++) json_array_append_new(p, json_integer((unsigned char)piece[k]));
                        }
                    }
                    json_array_append_new(a, pieces ? json_pack("{s:i,s:o*}", "id", (int)ids[i], "piece", p)
                                                    : json_integer(ids[i]));
                }
                free(ids);
                free(piece);
                out = json_pack("{s:o}", "tokens", a);
            }
        }
    } else {
        json_t *toks = json_object_get(o, "tokens");
        size_t n = json_array_size(toks);
        int32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
        bool ok = json_is_array(toks) && ids != NULL;
        for (size_t i = 0; ok && i < n; i++) {
            json_t *t = json_array_get(toks, i);
            ok = json_is_integer(t) && json_integer_value(t) >= 0 &&
                 json_integer_value(t) < vocab_n_tokens(s->cfg.voc);
            if (ok) ids[i] = (int32_t)json_integer_value(t);
        }
        char *text = NULL;
        size_t n_text = 0;
        if (!ok) {
            api_fail(&e, 400, "invalid_value", "`tokens` must be an array of token ids of this model");
        } else if (tok_detokenize_alloc(s->cfg.voc, ids, n, 0, &text, &n_text, &err) != 0) {
            api_fail(&e, 400, "invalid_value", "cannot detokenize: %s", err.msg);
        } else {
            /* a lone byte token is not UTF-8: U+FFFD, as in replies; under
             * llama-server's key and vLLM's */
            out = json_pack("{s:o,s:o}", "content", api_text_json(text, n_text), "prompt",
                            api_text_json(text, n_text));
        }
        free(text);
        free(ids);
    }
    json_decref(o);
    if (out == NULL && e.status == 0) /* no error said: the reply could not be built */
        api_fail(&e, 500, "server_error", "out of memory");
    if (out == NULL) return respond_error(s, c, endpoint, &e, 0);
    return respond_json(s, c, endpoint, 200, out);
}

/* GET /props: what llama-server's clients read of it (the context size in
 * default_generation_settings, the slots, the chat template and its
 * tokens), and the sampling defaults a request gets. */
static json_t *props_view(const server *s, const pool_info *pi)
{
    int slots = 0;
    for (int i = 0; i < pi->n_replicas; i++) slots += pi->rep[i].slots;
    proto_sampling d = proto_sampling_default();
    json_t *params = json_pack("{s:f,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:i}", "temperature", (double)d.temperature,
                               "top_k", d.top_k, "top_p", (double)d.top_p, "min_p", (double)d.min_p,
                               "typical_p", (double)d.typical_p, "repeat_penalty", (double)d.repeat_penalty,
                               "presence_penalty", (double)d.presence_penalty, "frequency_penalty",
                               (double)d.frequency_penalty, "repeat_last_n", d.penalty_last_n);
    return json_pack("{s:{s:I,s:o*},s:i,s:s,s:s,s:s,s:s,s:s,s:{s:b,s:b}}", "default_generation_settings", "n_ctx",
                     (json_int_t)pi->n_ctx, "params", params, "total_slots", slots, "model_alias",
                     s->cfg.model_name, "model_path", s->cfg.model_name, "chat_template",
                     api_chat_template(s->cfg.chat_template), "bos_token", s->cfg.bos ? s->cfg.bos : "",
                     "eos_token", s->cfg.eos ? s->cfg.eos : "", "modalities", "vision", 0, "audio", 0);
}

/* GET /slots (README "GET /slots"): the pool as pool_get_info saw it, one
 * object per replica; kv is null until that replica's engine, as now
 * running, has sent a pong with KV figures. Returns a new reference, or NULL
 * when out of memory. */
static json_t *slots_view(const pool_info *pi)
{
    json_t *reps = json_array();
    if (reps == NULL) return NULL;
    for (int i = 0; i < pi->n_replicas; i++) {
        const pool_replica_info *r = &pi->rep[i];
        json_t *kv = json_null();
        if (r->kv_known) {
            kv = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "blocks_total",
                           (json_int_t)r->kv.blocks, "blocks_used", (json_int_t)r->kv.used,
                           "blocks_cached", (json_int_t)r->kv.cached, "bytes",
                           (json_int_t)r->kv.bytes, "committed_bytes",
                           (json_int_t)r->kv.committed_bytes, "lookup_tokens",
                           (json_int_t)r->kv.lookup_tokens, "hit_tokens",
                           (json_int_t)r->kv.hit_tokens, "preemptions",
                           (json_int_t)r->kv.preemptions);
        }
        json_t *o = json_pack("{s:i,s:b,s:i,s:i,s:i,s:I,s:I,s:b,s:o*}", "replica", i, "ready",
                              r->ready != 0, "slots", r->slots, "busy", r->in_flight,
                              "waiting", r->waiting, "n_ctx",
                              (json_int_t)r->n_ctx, "restarts", (json_int_t)r->restarts,
                              "embeddings", r->embeddings != 0, "kv", kv);
        if (o == NULL || json_array_append_new(reps, o) != 0) {
            json_decref(reps);
            return NULL;
        }
    }
    return json_pack("{s:i,s:i,s:i,s:o}", "replicas_ready", pi->n_ready, "queued",
                     pi->queue_depth, "replicas_total", pi->n_replicas, "replicas", reps);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *s = cls;
    hctx *h = *con_cls;
    size_t limit = s->cfg.max_body_bytes ? s->cfg.max_body_bytes : HTTP_DEFAULT_BODY_LIMIT;
    api_error e;
    if (h == NULL) {
        h = calloc(1, sizeof(*h));
        if (h == NULL) return MHD_NO;
        *con_cls = h;
        h->counted = true;
        atomic_fetch_add(&s->active, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        unsigned long long n_announced = cl != NULL ? strtoull(cl, NULL, 10) : 0;
        /* a client that waits for `100 Continue` is answered at once */
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        bool waits = expect != NULL && strcasecmp(expect, "100-continue") == 0;
        if (n_announced > limit && n_announced - limit <= HTTP_DRAIN_BYTES && !waits) {
            h->too_large = true; /* read it, drop it, then answer 413 */
        } else if (n_announced > limit) {
            api_fail(&e, 413, "body_too_large", "the body is over %zu bytes", limit);
            /* metrics keep the label's pointer: a literal, never MHD's url */
            static const char *const labels[] = {"/v1/completions", "/v1/chat/completions", "/completion", "/infill",
                                                 "/v1/messages", "/v1/responses",
                                                 "/v1/embeddings", "/tokenize", "/detokenize"};
            const char *label = "other";
            for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
                if (strcmp(url, labels[i]) == 0) label = labels[i];
            }
            return respond_error(s, c, label, &e, 0); /* MHD closes after it */
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!h->too_large && h->body.len + *upload_size > limit) {
            h->too_large = true;
            h->n_dropped = h->body.len;
            sbuf_free(&h->body);
        }
        if (h->too_large) {
            h->n_dropped += *upload_size;
            if (h->n_dropped > limit + HTTP_DRAIN_BYTES) return MHD_NO; /* enough: hang up */
        } else if (sbuf_append(&h->body, upload_data, *upload_size) != 0) {
            return MHD_NO;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* The whole request is here. */
    enum { R_HEALTH, R_MODELS, R_METRICS, R_CMPL, R_CHAT, R_EMB, R_TOK, R_DETOK, R_SLOTS, R_PROPS,
           R_NATIVE, R_INFILL, R_APPLY, R_MESSAGES, R_COUNT, R_RESPONSES };
    static const struct {
        const char *path, *method;
        int kind;
    } routes[] = {{"/health", "GET", R_HEALTH},   {"/v1/models", "GET", R_MODELS},  {"/metrics", "GET", R_METRICS},
                  {"/v1/completions", "POST", R_CMPL}, {"/v1/chat/completions", "POST", R_CHAT},
                  {"/v1/embeddings", "POST", R_EMB},  {"/tokenize", "POST", R_TOK}, {"/detokenize", "POST", R_DETOK},
                  {"/slots", "GET", R_SLOTS}, {"/props", "GET", R_PROPS},
                  {"/completion", "POST", R_NATIVE}, {"/infill", "POST", R_INFILL}, /* llama-server's own */
                  {"/apply-template", "POST", R_APPLY},
                  /* Anthropic's Messages API */
                  {"/v1/messages", "POST", R_MESSAGES}, {"/v1/messages/count_tokens", "POST", R_COUNT},
                  /* OpenAI's Responses API */
                  {"/v1/responses", "POST", R_RESPONSES}, {"/responses", "POST", R_RESPONSES},
                  /* llama-server's paths without /v1 */
                  /* (llama-server's /completions is its own /completion, not OpenAI's) */
                  {"/models", "GET", R_MODELS}, {"/completions", "POST", R_NATIVE},
                  {"/chat/completions", "POST", R_CHAT}, {"/embeddings", "POST", R_EMB},
                  {"/v1/health", "GET", R_HEALTH}};
    int route = -1;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(url, routes[i].path) == 0) route = (int)i;
    }
    /* GET /v1/models/{id} (OpenAI's retrieve): the model under one of its names */
    const char *model_id = NULL;
    if (route < 0 && strncmp(url, "/v1/models/", 11) == 0 && url[11] != '\0') {
        model_id = url + 11;
        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
            if (strcmp(routes[i].path, "/v1/models") == 0) route = (int)i; /* its method, key, label */
        }
    }
    if (route < 0) {
        api_fail(&e, 404, "not_found", "no route %.100s %.200s", method, url);
        return respond_error(s, c, "other", &e, 0);
    }
    const char *endpoint = routes[route].path;
    if (strcmp(method, "OPTIONS") == 0) {
        /* a browser's CORS preflight: no key needed, nothing runs */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (r == NULL) return MHD_NO;
        const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        char allow[32];
        snprintf(allow, sizeof(allow), "%s, OPTIONS", routes[route].method);
        MHD_add_response_header(r, "Allow", allow);
        if (origin_allowed(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin"))) {
            MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
            MHD_add_response_header(r, "Access-Control-Allow-Headers", want ? want : "*");
            MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
        }
        add_cors(s, c, r);
        enum MHD_Result ret = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        metrics_count_request(&s->m, endpoint, 204);
        return ret;
    }
    if (strcmp(method, routes[route].method) != 0) {
        api_fail(&e, 405, "method_not_allowed", "%s takes %s", endpoint, routes[route].method);
        return respond(s, c, endpoint, 405, api_error_body(&e), "application/json",
                       routes[route].method);
    }
    int kind = routes[route].kind;
    if (kind != R_HEALTH && !authorized(s, c)) {
        api_fail(&e, 401, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
        return respond_error(s, c, endpoint, &e, 0);
    }
    if (h->too_large) {
        api_fail(&e, 413, "body_too_large", "the body is over %zu bytes", limit);
        return respond_error(s, c, endpoint, &e, 0);
    }
    pool_info pi;
    switch (kind) {
    case R_HEALTH:
        pool_get_info(s->p, &pi);
        if (pi.n_ready == 0 || atomic_load(&s->quiescing)) {
            api_fail(&e, 503, "unavailable", atomic_load(&s->quiescing) ? "shutting down" : "no engine is ready yet");
            return respond_error(s, c, endpoint, &e, 0);
        }
        return respond_json(s, c, endpoint, 200,
                            json_pack("{s:s,s:i,s:i}", "status", "ok", "replicas_ready", pi.n_ready,
                                      "replicas", pi.n_replicas));
    case R_MODELS: {
        pool_get_info(s->p, &pi);
        if (model_id != NULL) {
            bool known = strcmp(model_id, s->cfg.model_name) == 0;
            for (size_t i = 0; i < s->cfg.n_model_aliases && !known; i++) {
                known = strcmp(model_id, s->cfg.model_aliases[i]) == 0;
            }
            if (!known) {
                api_fail(&e, 404, "model_not_found", "the model `%.100s` does not exist; this server has `%.100s`",
                         model_id, s->cfg.model_name);
                return respond_error(s, c, endpoint, &e, 0);
            }
            return respond_json(s, c, endpoint, 200,
                                json_pack("{s:s,s:s,s:I,s:s,s:{s:I}}", "id", model_id, "object", "model", "created",
                                          (json_int_t)time(NULL), "owned_by", "strata", "meta", "n_ctx",
                                          (json_int_t)pi.n_ctx));
        }
        /* the served name, then its aliases: one model under each */
        json_t *data = json_array();
        for (size_t i = 0; i <= s->cfg.n_model_aliases; i++) {
            const char *id = i == 0 ? s->cfg.model_name : s->cfg.model_aliases[i - 1];
            json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:{s:I}}", "id", id, "object", "model",
                                                  "created", (json_int_t)time(NULL), "owned_by", "strata",
                                                  "meta", "n_ctx", (json_int_t)pi.n_ctx));
        }
        return respond_json(s, c, endpoint, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
    }
    case R_METRICS: {
        pool_get_info(s->p, &pi);
        sbuf out = {0};
        metrics_render(&s->m, &pi, s->cfg.model_name, &out);
        metrics_count_request(&s->m, endpoint, 200); /* counted before it is seen next time */
        struct MHD_Response *r = MHD_create_response_from_buffer(out.len, out.data, MHD_RESPMEM_MUST_FREE);
        if (r == NULL) {
            sbuf_free(&out);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
        add_cors(s, c, r);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    case R_CMPL: return handle_gen(s, c, endpoint, API_COMPLETION, h, SHAPE_OWN);
    case R_NATIVE: return handle_gen(s, c, endpoint, API_NATIVE, h, SHAPE_OWN);
    case R_INFILL: return handle_gen(s, c, endpoint, API_INFILL, h, SHAPE_OWN);
    case R_APPLY: return handle_apply_template(s, c, h);
    case R_MESSAGES: return handle_messages(s, c, endpoint, h, false);
    case R_COUNT: return handle_messages(s, c, endpoint, h, true);
    case R_RESPONSES: return handle_responses(s, c, endpoint, h);
    case R_CHAT: return handle_gen(s, c, endpoint, API_CHAT, h, SHAPE_OWN);
    case R_EMB: return handle_gen(s, c, endpoint, API_EMBEDDING, h, SHAPE_OWN);
    case R_TOK: return handle_tokenize(s, c, h, false);
    case R_DETOK: return handle_tokenize(s, c, h, true);
    case R_PROPS:
        pool_get_info(s->p, &pi);
        return respond_json(s, c, endpoint, 200, props_view(s, &pi));
    default:
        pool_get_info(s->p, &pi);
        return respond_json(s, c, endpoint, 200, slots_view(&pi));
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    server *s = cls;
    hctx *h = *con_cls;
    if (h == NULL) return;
    if (h->counted) atomic_fetch_sub(&s->active, 1);
    sbuf_free(&h->body);
    free(h);
    *con_cls = NULL;
}

int server_start(server **out, const server_config *c, pool *p, strata_err *err)
{
    server *s = calloc(1, sizeof(*s));
    if (s == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    s->cfg = *c;
    s->p = p;
    s->merge_system = !api_template_takes_system(c->chat_template, c->bos, c->eos);
    metrics_init(&s->m);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
    if (inet_pton(AF_INET, c->host ? c->host : "127.0.0.1", &addr.sin_addr) != 1) {
        metrics_free(&s->m);
        free(s);
        return strata_err_set(err, STRATA_EINVAL, "--host %s is not an IPv4 address", c->host);
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ITC | MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (s->d == NULL) {
        metrics_free(&s->m);
        free(s);
        return strata_err_set(err, STRATA_EIO, "cannot listen on %s:%d", c->host ? c->host : "127.0.0.1", c->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : c->port;
    *out = s;
    return 0;
}

int server_port(const server *s)
{
    return s->port;
}

void server_quiesce(server *s)
{
    atomic_store(&s->quiescing, true);
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int server_active(const server *s)
{
    return atomic_load(&((server *)s)->active);
}

void server_stop(server *s)
{
    if (s == NULL) return;
    atomic_store(&s->aborting, true);
    MHD_stop_daemon(s->d);
    metrics_free(&s->m);
    free(s);
}
