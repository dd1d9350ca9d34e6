/* A scripted engine for the contract tests: speaks engine protocol v1 (with
 * the shared codec) on stdin/stdout, and does what each request's prompt
 * tells it, so a test controls timing and failures per request:
 *
 *   prompt = [op, k_hi, k_lo, n_hi, n_lo, delay_hi, delay_lo, arg_hi, arg_lo]
 *   where each value v is sent as ids 35 + v / 90, 35 + v % 90 (op as 35 + op:
 *   printable ASCII byte tokens of a SentencePiece vocab).
 *
 *   op 0 NORMAL    n tokens (then EOS id 2 and `done` stop), or max_tokens
 *                  of them (`done` length); one `tok` every `delay` ms
 *   op 1 ERR       arg tokens, then `err` "internal" "fake failure <k>"
 *   op 2 DIE       arg tokens, then the process exits with status 3
 *   op 3 LATE_DONE tokens every delay ms until `stop`; `done` comes arg ms
 *                  after the `stop`
 *   op 4 SILENT    nothing until `stop`
 *   op 5 BAD_TOKEN one token id 99999999 (no vocab has it), then as LATE_DONE
 *   op 6 STOP_DIES tokens every delay ms until `stop`; arg ms after the `stop`,
 *                  with no `done`: n 0, the process exits with status 3; n 1,
 *                  it closes its stdout and lives on until its stdin closes
 *   op 7 OVERRUN   n tokens whatever max_tokens says, then EOS and `done` stop
 *   op 8 WEDGE     arg tokens every delay ms, then the whole scheduler hangs
 *                  for good: no request of this engine moves again (`stop`s
 *                  are taken and ignored), while pings are still answered.
 *                  n >= 1: inside a step of n tokens (pongs say running, for
 *                  longer and longer); n 0: outside any step (not running,
 *                  the step count frozen)
 *   op 9 LONG_STEP one step of n tokens that runs delay ms (pongs say
 *                  running meanwhile; no request moves), then arg tokens,
 *                  EOS and `done` stop
 *
 * Progress, as `pong` reports it (engine/protocol.h): the fake "steps" once
 * per pass of its loop while it has requests (at least every 100 ms, so a
 * SILENT request still shows progress); a step is never running but in
 * WEDGE and LONG_STEP; ms_per_token is FAKE_ENGINE_MS_PER_TOKEN (default
 * 0.5); kv says 16 blocks of which one per live request is used, 3
 * cached, 1024 bytes (512 committed), lookup_tokens the prompt tokens of
 * every gen received, hit_tokens the sum of their cached_n (k % 5), 2
 * preemptions.
 *
 * Token i of request k is 259 + (k * 31 + i * 17) % 253. Stats are a
 * function of k alone: cached_n k % 5, prompt_ms k * 0.5 + 0.25,
 * predicted_ms k * 1.25 + 0.5, predicted_n the tokens sent.
 *
 * Environment (each optional):
 *   FAKE_ENGINE_LOG=path    appends "gen <k>" for each gen received and
 *                           "stop <k>" for each `stop` of a live request
 *   FAKE_ENGINE_CRASH=path  while path exists, the engine exits with status 3
 *                           at start, before `ready` (also while held)
 *   FAKE_ENGINE_HOLD=path   while path exists, the engine holds back `ready`;
 *                           any input meanwhile (the server's `shutdown`, or
 *                           EOF) makes it exit 0
 *   FAKE_ENGINE_MS_PER_TOKEN=x  the pongs' ms_per_token
 *   FAKE_ENGINE_PREFIX=1    `ready` says the prefix cache is on (32-token
 *                           blocks, reuse from 32 tokens), so the server
 *                           routes by prefix; a longer prompt whose last 9
 *                           tokens are a script runs that script (what
 *                           precedes it is the prefix a test routes by)
 *   FAKE_ENGINE_SCRIPT=path  a plain prompt (no op header) outputs the token
 *                           ids that path holds (whitespace-separated, read
 *                           at each gen, at most FAKE_SCRIPT_MAX), one per
 *                           step, then EOS and `done` stop (max_tokens still
 *                           cuts it: `done` length) */
#define _GNU_SOURCE
#include "engine/protocol.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { OP_NORMAL, OP_ERR, OP_DIE, OP_LATE_DONE, OP_SILENT, OP_BAD_TOKEN, OP_STOP_DIES, OP_OVERRUN,
       OP_WEDGE, OP_LONG_STEP, OP_COUNT };

typedef struct fake_req {
    bool used;
    int64_t id;
    int op, k, n, delay, arg;
    int64_t max_tokens;
    int sent;
    int64_t n_prompt;
    int64_t next_ms;      /* when to act next */
    bool stopping;        /* `stop` received */
    int64_t done_at_ms;   /* LATE_DONE: when to send `done` */
    bool bad_sent;
    bool long_done;       /* LONG_STEP: its long step has begun */
    int32_t *script;      /* FAKE_ENGINE_SCRIPT's ids (n_script), or NULL */
    int n_script;
} fake_req;

#define FAKE_SCRIPT_MAX 4096

#define FAKE_MAX 256
static fake_req g_reqs[FAKE_MAX];
static proto_buf g_out;
static bool g_mute; /* stdout closed: what would be written is dropped */

/* The scheduler's progress as pongs report it (see the top). */
static int64_t g_steps;
static bool g_stalled;          /* in a long step or a wedge: nothing moves */
static bool g_stall_running;    /* ... inside a step (pongs say running) */
static int64_t g_stall_start_ms, g_stall_until_ms; /* INT64_MAX: for good */
static int64_t g_stall_tokens;
static double g_ms_per_token = 0.5;
static int64_t g_lookup_tokens, g_hit_tokens; /* pong.kv's, summed over gens */
static bool g_prefix;            /* FAKE_ENGINE_PREFIX */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void flush_out(void)
{
    if (g_mute) {
        g_out.len = 0;
        return;
    }
    size_t off = 0;
    while (off < g_out.len) {
        ssize_t k = write(STDOUT_FILENO, g_out.data + off, g_out.len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) exit(4);
        off += (size_t)k;
    }
    g_out.len = 0;
}

static void emit(const proto_msg *m)
{
    strata_err err;
    if (proto_encode(m, &g_out, &err) != 0) {
        fprintf(stderr, "fake_engine: encode: %s\n", err.msg);
        exit(5);
    }
}

static void send_tok(fake_req *r, int32_t id)
{
    proto_msg m = {.op = PROTO_OP_TOK, .has_id = true, .id = r->id};
    m.u.tok.tokens = &id;
    m.u.tok.n_tokens = 1;
    emit(&m);
    r->sent++;
}

static void send_done(fake_req *r, proto_finish f)
{
    proto_msg m = {.op = PROTO_OP_DONE, .has_id = true, .id = r->id};
    m.u.done.finish = f;
    m.u.done.stats = (proto_stats){.prompt_n = r->n_prompt, .cached_n = r->k % 5,
                                   .predicted_n = r->sent, .prompt_ms = r->k * 0.5 + 0.25,
                                   .predicted_ms = r->k * 1.25 + 0.5};
    emit(&m);
    r->used = false;
    free(r->script);
    r->script = NULL;
}

static void stall(int64_t t, int64_t for_ms, bool running, int64_t tokens)
{
    g_stalled = true;
    g_stall_running = running;
    g_stall_start_ms = t;
    g_stall_until_ms = for_ms < 0 ? INT64_MAX : t + for_ms;
    g_stall_tokens = tokens;
}

static void send_pong(int64_t id, int n_live)
{
    proto_msg pong = {.op = PROTO_OP_PONG, .has_id = true, .id = id};
    proto_pong *pg = &pong.u.pong;
    pg->has_progress = true;
    pg->steps = g_steps;
    pg->running = g_stalled && g_stall_running;
    if (pg->running) {
        pg->step_ms = (double)(now_ms() - g_stall_start_ms);
        pg->step_tokens = g_stall_tokens;
    }
    pg->ms_per_token = g_ms_per_token;
    pg->has_kv = true;
    pg->kv_blocks = 16;
    pg->kv_used = n_live;
    pg->kv_bytes = 1024;
    pg->kv_committed_bytes = 512;
    pg->kv_cached = 3;
    pg->kv_lookup_tokens = g_lookup_tokens;
    pg->kv_hit_tokens = g_hit_tokens;
    pg->kv_preemptions = 2;
    emit(&pong);
}

static int decode2(const int32_t *t)
{
    return (t[0] - 35) * 90 + (t[1] - 35);
}

static void on_gen(const proto_msg *m, FILE *log)
{
    const proto_gen *g = &m->u.gen;
    fake_req *r = NULL;
    for (int i = 0; i < FAKE_MAX && r == NULL; i++) {
        if (!g_reqs[i].used) r = &g_reqs[i];
    }
    if (r == NULL) {
        proto_encode_err(&g_out, m->id, PROTO_ERR_INTERNAL, "fake engine full", NULL);
        return;
    }
    free(r->script); /* a request that ended without `done` */
    memset(r, 0, sizeof(*r));
    r->used = true;
    r->id = m->id;
    r->n_prompt = (int64_t)g->n_tokens;
    r->max_tokens = g->max_tokens;
    const int32_t *sc = g->n_tokens >= 9 ? g->tokens + g->n_tokens - 9 : NULL;
    if (sc != NULL && (g->n_tokens == 9 || g_prefix) && sc[0] >= 35 && sc[0] < 35 + OP_COUNT) {
        r->op = sc[0] - 35;
        r->k = decode2(sc + 1);
        r->n = decode2(sc + 3);
        r->delay = decode2(sc + 5);
        r->arg = decode2(sc + 7);
    } else {
        r->op = 0; /* a plain prompt: a few tokens */
        r->k = (int)g->n_tokens;
        r->n = 4;
        const char *script = getenv("FAKE_ENGINE_SCRIPT");
        FILE *sf = script != NULL ? fopen(script, "r") : NULL;
        if (sf != NULL) {
            r->script = malloc(FAKE_SCRIPT_MAX * sizeof(int32_t));
            int id;
            while (r->script != NULL && r->n_script < FAKE_SCRIPT_MAX && fscanf(sf, "%d", &id) == 1) {
                r->script[r->n_script++] = id;
            }
            r->n = r->n_script;
            fclose(sf);
        }
    }
    g_lookup_tokens += r->n_prompt;
    g_hit_tokens += r->k % 5;
    if (log != NULL) {
        fprintf(log, "gen %d\n", r->k);
        if (g->grammar != NULL) { /* one line: newlines and backslashes escaped */
            fputs("grammar ", log);
            for (const char *c = g->grammar; *c; c++) {
                if (*c == '\n') fputs("\\n", log);
                else if (*c == '\\') fputs("\\\\", log);
                else fputc(*c, log);
            }
            fputc('\n', log);
        }
        fflush(log);
    }
    r->next_ms = now_ms() + r->delay;
}

static void step(fake_req *r, int64_t t)
{
    if (r->stopping && r->op == OP_STOP_DIES) {
        if (t < r->done_at_ms) return;
        if (r->n == 0) {
            flush_out();
            _exit(3);
        }
        flush_out();
        close(STDOUT_FILENO); /* the server sees EOF; no `done` ever comes */
        g_mute = true;
        r->used = false;
        return;
    }
    if (r->stopping) {
        if (r->op == 3 || r->op == 5) {
            if (t >= r->done_at_ms) send_done(r, PROTO_FINISH_CANCELLED);
        } else {
            send_done(r, PROTO_FINISH_CANCELLED);
        }
        return;
    }
    if (t < r->next_ms) return;
    r->next_ms = t + r->delay;
    int32_t tok = 259 + (r->k * 31 + r->sent * 17) % 253;
    if (r->script != NULL && r->sent < r->n_script) tok = r->script[r->sent];
    switch (r->op) {
    case 0:
        if (r->max_tokens >= 0 && r->sent >= r->max_tokens) {
            send_done(r, PROTO_FINISH_LENGTH);
        } else if (r->sent >= r->n) {
            send_tok(r, 2);
            send_done(r, PROTO_FINISH_STOP);
        } else {
            send_tok(r, tok);
        }
        break;
    case 1:
        if (r->sent >= r->arg) {
            char msg[64];
            snprintf(msg, sizeof(msg), "fake failure %d", r->k);
            proto_encode_err(&g_out, r->id, PROTO_ERR_INTERNAL, msg, NULL);
            r->used = false;
        } else {
            send_tok(r, tok);
        }
        break;
    case 2:
        if (r->sent >= r->arg) {
            flush_out();
            _exit(3);
        }
        send_tok(r, tok);
        break;
    case OP_OVERRUN:
        if (r->sent >= r->n) {
            send_tok(r, 2);
            send_done(r, PROTO_FINISH_STOP);
        } else {
            send_tok(r, tok);
        }
        break;
    case 5:
        if (!r->bad_sent) {
            r->bad_sent = true;
            send_tok(r, 99999999);
            break;
        }
        /* fall through */
    case 3:
    case OP_STOP_DIES: send_tok(r, tok); break;
    case OP_WEDGE:
        if (r->sent < r->arg) send_tok(r, tok);
        else stall(t, -1, r->n > 0, r->n);
        break;
    case OP_LONG_STEP:
        r->next_ms = t; /* its tokens come one per pass once the step is over */
        if (!r->long_done) {
            r->long_done = true;
            stall(t, r->delay, true, r->n);
        } else if (r->sent >= r->arg) {
            send_tok(r, 2);
            send_done(r, PROTO_FINISH_STOP);
        } else {
            send_tok(r, tok);
        }
        break;
    default: break; /* 4: silent */
    }
}

int main(int argc, char **argv)
{
    int slots = 1, n_ctx = 512;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--slots") == 0) slots = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--ctx") == 0) n_ctx = atoi(argv[i + 1]);
    }
    const char *crash = getenv("FAKE_ENGINE_CRASH");
    const char *hold = getenv("FAKE_ENGINE_HOLD");
    for (;;) {
        if (crash != NULL && access(crash, F_OK) == 0) {
            fprintf(stderr, "fake_engine: %s exists: crashing at start\n", crash);
            return 3;
        }
        if (hold == NULL || access(hold, F_OK) != 0) break;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int pr = poll(&p, 1, 10);
        if (pr > 0) return 0; /* `shutdown` or EOF before `ready`: nothing to serve */
        if (pr < 0 && errno != EINTR) return 6;
    }
    const char *mpt = getenv("FAKE_ENGINE_MS_PER_TOKEN");
    if (mpt != NULL) g_ms_per_token = atof(mpt);
    const char *pfx = getenv("FAKE_ENGINE_PREFIX");
    g_prefix = pfx != NULL && strcmp(pfx, "1") == 0;
    const char *log_path = getenv("FAKE_ENGINE_LOG");
    FILE *log = log_path ? fopen(log_path, "ae") : NULL;
    proto_msg ready = {.op = PROTO_OP_READY};
    ready.u.ready = (proto_ready){.protocol = 1, .arch = "fake", .n_vocab = 512, .n_embd = 8,
                                  .n_layer = 1, .n_ctx_train = 512, .kv_block_tokens = 32,
                                  .kv_n_blocks = 16, .kv_bytes = 1024, .slots = slots,
                                  .n_ctx = n_ctx, .n_batch = 64, .kv_type = "f16",
                                  .kv_prefix_cache = g_prefix, .kv_cache_min_tokens = 32};
    emit(&ready);
    flush_out();
    proto_reader rd;
    proto_reader_init(&rd, 0);
    bool shutting = false, eof = false;
    for (;;) {
        int64_t t = now_ms(), wait = 1000;
        int n_live = 0;
        for (int i = 0; i < FAKE_MAX; i++) {
            fake_req *r = &g_reqs[i];
            if (!r->used) continue;
            n_live++;
            int64_t due = r->stopping ? r->done_at_ms : r->next_ms;
            if (r->op == 4 && !r->stopping) continue;
            if (due - t < wait) wait = due - t;
        }
        if (n_live > 0 && wait > 100) wait = 100; /* a step at least this often */
        if (g_stalled) {
            wait = g_stall_until_ms == INT64_MAX ? 1000 : g_stall_until_ms - t;
        }
        if (eof || (shutting && n_live == 0)) break; /* EOF: the server is gone */
        if (wait < 0) wait = 0;
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int pr = eof ? 0 : poll(&p, 1, (int)wait);
        if (eof && wait > 0) usleep((useconds_t)wait * 1000);
        if (pr > 0) {
            strata_err err;
            long got = proto_reader_fill(&rd, STDIN_FILENO, &err);
            if (got <= 0) eof = true;
            const char *line;
            size_t len;
            int k;
            while ((k = proto_reader_next(&rd, &line, &len)) == PROTO_READ_LINE) {
                proto_msg m;
                proto_error pe;
                if (proto_decode(line, len, PROTO_DIR_TO_ENGINE, &m, &pe) != 0) {
                    proto_encode_err(&g_out, pe.has_id ? pe.id : -1, pe.code, pe.message, NULL);
                    continue;
                }
                if (m.op == PROTO_OP_GEN) {
                    if (shutting) proto_encode_err(&g_out, m.id, PROTO_ERR_SHUTTING_DOWN, "bye", NULL);
                    else on_gen(&m, log);
                } else if (m.op == PROTO_OP_STOP) {
                    for (int i = 0; i < FAKE_MAX; i++) {
                        fake_req *r = &g_reqs[i];
                        if (r->used && r->id == m.id && !r->stopping) {
                            r->stopping = true;
                            bool later = r->op == 3 || r->op == 5 || r->op == OP_STOP_DIES;
                            r->done_at_ms = now_ms() + (later ? r->arg : 0);
                            if (log != NULL) {
                                fprintf(log, "stop %d\n", r->k);
                                fflush(log);
                            }
                        }
                    }
                } else if (m.op == PROTO_OP_PING) {
                    send_pong(m.id, n_live);
                } else if (m.op == PROTO_OP_SHUTDOWN) {
                    shutting = true;
                }
                proto_msg_free(&m);
            }
            if (k == PROTO_READ_EOF) eof = true;
        }
        t = now_ms();
        if (g_stalled && t >= g_stall_until_ms) {
            g_stalled = false; /* the long step is over */
            g_steps++;
        }
        if (!g_stalled) {
            bool any = false;
            for (int i = 0; i < FAKE_MAX && !g_stalled; i++) {
                if (!g_reqs[i].used) continue;
                any = true;
                step(&g_reqs[i], t);
            }
            if (any && !g_stalled) g_steps++;
        }
        flush_out();
    }
    proto_reader_free(&rd);
    proto_buf_free(&g_out);
    if (log != NULL) fclose(log);
    return 0;
}
