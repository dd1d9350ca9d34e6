/* loadgen: a load generator for `strata serve`. It sends streaming
 * completions to a server on 127.0.0.1 at one or more concurrency levels
 * and prints, per level, a Markdown table row: requests/s, generated
 * tokens/s, time to first token and inter-token latency (p50/p99), errors.
 *
 *   loadgen [--port 8080] [-c 1,4,16] [--requests N] [--duration S]
 *           [--max-tokens 64] [--api-key KEY] [--model NAME] [--chat]
 *           [--prompt-file F] [--temperature 0.8] [--seed 1] [--ban-token ID]
 *           [--logit-bias ID=BIAS]
 *           [--timeout 120] [--warmup 1] [--wait S] [--host 127.0.0.1]
 *
 * How a level runs: C client threads each open one connection per request
 * (`Connection: close`), POST a streaming request and read its SSE events
 * until `data: [DONE]`; a thread starts its next request as soon as the
 * last one ended, so C requests are in flight at all times. A level ends
 * after --requests requests (default 64) or, with --duration, when that
 * many seconds have passed (no new request starts after that; the ones in
 * flight finish); with both, whichever comes first. Every request has its
 * own prompt and seed (a counter over the whole run), `max_tokens`,
 * `stream: true` and `stream_options.include_usage`.
 *
 * What is measured, per successful request (client-side, monotonic clock):
 *  - TTFT: from just before connect() to the arrival of the first event
 *    whose text (`choices[0].text`, or `delta.content` with --chat) is not
 *    empty. Tokens whose text the server holds back (a partial UTF-8
 *    character, a possible stop string) arrive with a later event.
 *  - server TTFT: the server's own figure, `timings.ttft_ms` of the final
 *    event (from admission to the engine's first token, queueing
 *    included), for requests that generated a token. It is there also when
 *    no token had text (random-weight models mostly sample reserved tokens
 *    that print nothing: no content event, so no TTFT or ITL above), and
 *    the difference to TTFT is what HTTP, detokenizing and SSE add.
 *  - generated tokens: `usage.completion_tokens` of the usage event
 *    (`timings.predicted_n` of the final event when usage is missing).
 *  - inter-token latency: an SSE event does not say how many tokens it
 *    carries. When a request's N tokens arrived in E content events with
 *    E = N (every event one token, the usual case) the E-1 gaps between
 *    consecutive content events are the samples. When E < N (the server
 *    sent several tokens in one event because it had fallen behind), each
 *    gap is divided by (N-1)/(E-1), the mean number of tokens an event
 *    carried after the first one (which comes from the prefill step and
 *    holds one token), so that the request's samples sum to its decode
 *    time and average to its time per output token. The `tok/event`
 *    column (all N over all E) shows how often that happened. Events
 *    that arrive in one read() share its time (a gap of 0).
 * Per level: requests/s = successful requests / wall time of the level;
 * gen tok/s = their generated tokens / that wall time; percentiles are
 * nearest-rank over all samples of the level (with few samples p99 is the
 * largest). A failed request (connection refused, a status other than 200,
 * an error event, a malformed event, a stream that ends before [DONE], no
 * token count, the --timeout deadline) counts as an error and adds nothing
 * else; the distinct error messages are printed on stderr, with counts.
 * A refused connection means the server is gone: the level then starts no
 * new request and the later levels do not run.
 *
 * Safety: it only ever connects to 127.0.0.1 (--host accepts nothing
 * else), every number it takes is bounded, and every socket operation
 * waits at most until the request's --timeout deadline, so a stuck or
 * misbehaving server cannot hang it. Exit status: 0 when every request
 * succeeded, 1 when a request failed or the server could not be reached,
 * 2 for bad options. Figures, not a test: nothing here asserts on speed. */
#include "base/clock.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bounds on what the options accept, so that a run always ends. */
#define LG_MAX_LEVELS 16
#define LG_MAX_CONCURRENCY 1024
#define LG_MAX_REQUESTS 100000 /* per level */
#define LG_MAX_DURATION_S 3600.0
#define LG_MAX_TIMEOUT_S 3600.0
#define LG_MAX_WAIT_S 600.0
#define LG_MAX_MAX_TOKENS 65536
#define LG_MAX_BIASES 16
#define LG_MAX_PROMPT_LINES 100000
#define LG_MAX_PROMPT_FILE_BYTES (16u << 20)
/* Limits on what is read from the server. */
#define LG_MAX_HEAD_BYTES 16384
#define LG_MAX_EVENT_BYTES (1u << 20)
#define LG_MAX_ERROR_BODY_BYTES 4096
/* ITL samples kept per level; past this, a uniform reservoir sample. */
#define LG_MAX_ITL_SAMPLES (1u << 22)
#define LG_N_ERROR_KINDS 4 /* distinct error messages kept per level */
#define LG_ERR_MAX 256

typedef struct lg_opts {
    int port;
    const char *api_key; /* NULL: no Authorization header */
    const char *model;   /* NULL: no `model` field (the server's only model) */
    bool chat;           /* /v1/chat/completions instead of /v1/completions */
    int max_tokens;
    int64_t n_requests;  /* per level */
    double duration_s;   /* per level; 0: no time limit */
    double timeout_s;    /* per request, whole request */
    double wait_s;       /* how long to wait for /health at start; 0: check once */
    double temperature;
    uint64_t seed;       /* request i gets seed + i */
    int warmup;
    int levels[LG_MAX_LEVELS];
    int n_levels;
    int bias_ids[LG_MAX_BIASES]; /* sent as `logit_bias` {id: bias} */
    double biases[LG_MAX_BIASES];
    int n_biases;
    char **prompts;        /* from --prompt-file; NULL: built-in prompts */
    size_t n_prompts;
    char *prompt_buf;      /* owns the text the prompts point into */
} lg_opts;

/* ------------------------------------------------------------------ */
/* Prompts                                                             */
/* ------------------------------------------------------------------ */

/* Built-in prompts are composed from three lists, so that the first
 * 8 x 16 x 16 = 2048 requests of a run each get a different sentence; later
 * ones add a chapter number. Short and story-like: they suit the small
 * story models as well as the large ones. */
static const char *const k_openers[] = {
    "Once upon a time", "One sunny morning", "Long ago", "One day",
    "In a small town", "At the edge of the forest", "Last summer", "On a rainy afternoon",
};
static const char *const k_subjects[] = {
    "a little girl named Lily", "a boy named Tom", "a friendly dog", "an old cat",
    "a tiny bird", "a brave knight", "a curious fox", "a kind farmer",
    "a shy rabbit", "a big red truck", "a happy frog", "a small robot",
    "a wise owl", "a young princess", "a lost puppy", "a funny clown",
};
static const char *const k_actions[] = {
    "found a shiny key", "wanted to fly", "saw a big tree", "lost a favorite toy",
    "made a new friend", "went to the park", "baked a cake", "heard a strange noise",
    "built a sand castle", "looked for treasure", "climbed a hill", "planted a seed",
    "met a dragon", "painted a picture", "found a secret door", "sang a song",
};
#define LG_N_OPENERS (sizeof(k_openers) / sizeof(k_openers[0]))
#define LG_N_SUBJECTS (sizeof(k_subjects) / sizeof(k_subjects[0]))
#define LG_N_ACTIONS (sizeof(k_actions) / sizeof(k_actions[0]))

/* The prompt of request number i of the run (0-based): a line of the
 * prompt file, or a built-in one composed into buf. */
static const char *lg_prompt(const lg_opts *o, int64_t i, char *buf, size_t cap)
{
    if (o->prompts != NULL) return o->prompts[(uint64_t)i % o->n_prompts];
    uint64_t u = (uint64_t)i;
    const uint64_t n_combos = LG_N_OPENERS * LG_N_SUBJECTS * LG_N_ACTIONS;
    int k = snprintf(buf, cap, "%s, %s %s.", k_openers[u % LG_N_OPENERS],
                     k_subjects[(u / LG_N_OPENERS) % LG_N_SUBJECTS],
                     k_actions[(u / (LG_N_OPENERS * LG_N_SUBJECTS)) % LG_N_ACTIONS]);
    if (u >= n_combos && k > 0 && (size_t)k < cap) {
        snprintf(buf + k, cap - (size_t)k, " Chapter %" PRIu64 ".", u / n_combos + 1);
    }
    return buf;
}

/* Reads --prompt-file: one prompt per non-empty line. 0, or -1 with a
 * message on stderr. */
static int lg_load_prompts(lg_opts *o, const char *path)
{
    FILE *f = fopen(path, "rbe");
    if (f == NULL) {
        fprintf(stderr, "loadgen: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (buf == NULL) break;
        if (n == cap) {
            if (cap >= LG_MAX_PROMPT_FILE_BYTES) {
                fprintf(stderr, "loadgen: %s is larger than %u bytes\n", path,
                        LG_MAX_PROMPT_FILE_BYTES);
                free(buf);
                fclose(f);
                return -1;
            }
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    bool read_error = ferror(f) != 0;
    fclose(f);
    if (buf == NULL || read_error) {
        fprintf(stderr, "loadgen: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        fprintf(stderr, "loadgen: %s holds a NUL byte; it must be text\n", path);
        free(buf);
        return -1;
    }
    size_t n_lines = 0;
    char **lines = NULL;
    for (char *p = buf; *p != '\0';) {
        char *eol = strchr(p, '\n');
        char *next = eol ? eol + 1 : p + strlen(p);
        if (eol) *eol = '\0';
        size_t len = strlen(p);
        if (len > 0 && p[len - 1] == '\r') p[--len] = '\0';
        if (len > 0) {
            if (n_lines == LG_MAX_PROMPT_LINES) {
                fprintf(stderr, "loadgen: %s has more than %d prompts\n", path,
                        LG_MAX_PROMPT_LINES);
                free(lines);
                free(buf);
                return -1;
            }
            if ((n_lines & (n_lines - 1)) == 0) { /* grow at powers of two */
                char **nl = realloc(lines, (n_lines ? n_lines * 2 : 1) * sizeof(*nl));
                if (nl == NULL) {
                    free(lines);
                    free(buf);
                    fprintf(stderr, "loadgen: out of memory\n");
                    return -1;
                }
                lines = nl;
            }
            lines[n_lines++] = p;
        }
        p = next;
    }
    if (n_lines == 0) {
        fprintf(stderr, "loadgen: %s has no prompt (one per non-empty line)\n", path);
        free(lines);
        free(buf);
        return -1;
    }
    o->prompts = lines;
    o->n_prompts = n_lines;
    o->prompt_buf = buf;
    return 0;
}

/* The JSON body of request number i, malloc'd (caller frees); NULL when out
 * of memory. */
static char *lg_request_body(const lg_opts *o, int64_t i)
{
    char buf[256];
    const char *prompt = lg_prompt(o, i, buf, sizeof(buf));
    json_t *j = json_object();
    if (j == NULL) return NULL;
    if (o->model != NULL) json_object_set_new(j, "model", json_string(o->model));
    if (o->chat) {
        json_object_set_new(j, "messages",
                            json_pack("[{s:s,s:s}]", "role", "user", "content", prompt));
    } else {
        json_object_set_new(j, "prompt", json_string(prompt));
    }
    json_object_set_new(j, "max_tokens", json_integer(o->max_tokens));
    json_object_set_new(j, "temperature", json_real(o->temperature));
    json_object_set_new(j, "seed", json_integer((json_int_t)((o->seed + (uint64_t)i) &
                                                             (uint64_t)INT64_MAX)));
    json_object_set_new(j, "stream", json_true());
    json_object_set_new(j, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (o->n_biases > 0) {
        json_t *bias = json_object();
        for (int k = 0; k < o->n_biases; k++) {
            char key[16];
            snprintf(key, sizeof(key), "%d", o->bias_ids[k]);
            json_object_set_new(bias, key, json_real(o->biases[k]));
        }
        json_object_set_new(j, "logit_bias", bias);
    }
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

/* ------------------------------------------------------------------ */
/* A request's connection: connect, send, receive with a deadline      */
/* ------------------------------------------------------------------ */

static void lg_errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lg_errf(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, LG_ERR_MAX, fmt, ap);
    va_end(ap);
}

/* Milliseconds left until deadline_ns, for poll(); 0 when past. */
static int lg_ms_left(int64_t deadline_ns)
{
    int64_t left = deadline_ns - strata_clock_ns();
    if (left <= 0) return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int lg_wait(int fd, short events, int64_t deadline_ns)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = lg_ms_left(deadline_ns);
        if (ms == 0) return 0;
        int k = poll(&p, 1, ms);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) continue; /* re-check the clock: poll may wake early */
        return 1;
    }
}

/* A non-blocking TCP connection to 127.0.0.1:port; -1 with err filled, -2
 * when the connection was refused (nothing listens on the port). */
static int lg_connect(int port, int64_t deadline_ns, char *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        lg_errf(err, "socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* never anything else */
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) {
        int e = errno;
        lg_errf(err, "cannot connect to 127.0.0.1:%d: %s", port, strerror(e));
        close(fd);
        return e == ECONNREFUSED ? -2 : -1;
    }
    if (rc != 0) {
        int w = lg_wait(fd, POLLOUT, deadline_ns);
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (w <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            lg_errf(err, "cannot connect to 127.0.0.1:%d: %s", port,
                    w == 0 ? "timed out" : strerror(soerr ? soerr : errno));
            close(fd);
            return w > 0 && soerr == ECONNREFUSED ? -2 : -1;
        }
    }
    return fd;
}

static int lg_send_all(int fd, const char *p, size_t n, int64_t deadline_ns, char *err)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = lg_wait(fd, POLLOUT, deadline_ns);
            if (w == 0) {
                lg_errf(err, "timed out sending the request");
                return -1;
            }
            if (w < 0) {
                lg_errf(err, "poll: %s", strerror(errno));
                return -1;
            }
            continue;
        }
        if (k <= 0) {
            lg_errf(err, "sending the request: %s", k < 0 ? strerror(errno) : "connection closed");
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* HTTP/1.1 response reader (incremental)                              */
/* ------------------------------------------------------------------ */

/* Decoded body bytes go to a sink: it returns 0 to go on, 1 when it has
 * seen all it needs (e.g. [DONE]), -1 on an error it wrote into err. */
typedef int (*lg_sink_fn)(void *ctx, const char *p, size_t n, char *err);

enum lg_http_state {
    LG_HTTP_HEAD,
    LG_HTTP_CHUNK_SIZE, /* reading a chunk-size line */
    LG_HTTP_CHUNK_DATA,
    LG_HTTP_CHUNK_END,  /* the CRLF after a chunk's data */
    LG_HTTP_TRAILER,    /* trailer lines after the last chunk */
    LG_HTTP_BODY_LENGTH,
    LG_HTTP_BODY_CLOSE, /* until the server closes */
    LG_HTTP_DONE,
};

typedef struct lg_http {
    enum lg_http_state st;
    char head[LG_MAX_HEAD_BYTES + 1];
    size_t n_head;
    int status;
    uint64_t left;   /* bytes left in the chunk or the Content-Length body */
    char line[256];  /* chunk-size and trailer lines */
    size_t n_line;
    lg_sink_fn ok_sink;    /* receives the body of a 200 response */
    lg_sink_fn other_sink; /* receives the body of any other status */
    lg_sink_fn sink;       /* the one of the two chosen by the status */
    void *sink_ctx;
} lg_http;

/* A header's value (NUL-terminated copy into val) when the head block has it. */
static bool lg_header(const char *head, const char *name, char *val, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p != NULL; p = strstr(p, "\r\n")) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ' || *v == '\t') v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
            if (n >= cap) n = cap - 1;
            memcpy(val, v, n);
            val[n] = '\0';
            return true;
        }
    }
    return false;
}

/* Parses the complete head block (status line and headers). */
static int lg_http_parse_head(lg_http *h, char *err)
{
    int major, minor, status;
    char sp;
    if (sscanf(h->head, "HTTP/%d.%d %3d%c", &major, &minor, &status, &sp) != 4 || sp != ' ' ||
        major != 1 || status < 100 || status > 599) {
        lg_errf(err, "not an HTTP/1.x status line: \"%.60s\"", h->head);
        return -1;
    }
    h->status = status;
    h->sink = status == 200 ? h->ok_sink : h->other_sink;
    char val[128];
    if (lg_header(h->head, "Transfer-Encoding", val, sizeof(val))) {
        if (strcasecmp(val, "chunked") != 0) {
            lg_errf(err, "unsupported Transfer-Encoding \"%s\"", val);
            return -1;
        }
        h->st = LG_HTTP_CHUNK_SIZE;
    } else if (lg_header(h->head, "Content-Length", val, sizeof(val))) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(val, &end, 10);
        if (val[0] < '0' || val[0] > '9' || *end != '\0' || errno != 0) {
            lg_errf(err, "bad Content-Length \"%s\"", val);
            return -1;
        }
        h->left = n;
        h->st = n > 0 ? LG_HTTP_BODY_LENGTH : LG_HTTP_DONE;
    } else {
        h->st = LG_HTTP_BODY_CLOSE;
    }
    return 0;
}

/* Collects one CRLF-terminated line of at most sizeof(h->line)-1 bytes.
 * Returns bytes consumed; *complete when the line ended (CR stripped). */
static size_t lg_http_line(lg_http *h, const char *p, size_t n, bool *complete, char *err)
{
    *complete = false;
    size_t i = 0;
    while (i < n) {
        char c = p[i++];
        if (c == '\n') {
            if (h->n_line > 0 && h->line[h->n_line - 1] == '\r') h->n_line--;
            h->line[h->n_line] = '\0';
            *complete = true;
            return i;
        }
        if (h->n_line + 1 >= sizeof(h->line)) {
            lg_errf(err, "a chunk line longer than %zu bytes", sizeof(h->line) - 1);
            *complete = false;
            return SIZE_MAX;
        }
        h->line[h->n_line++] = c;
    }
    return i;
}

/* Feeds received bytes. 0: more wanted; 1: the response is complete (or
 * the sink has what it needs); -1: error in err. */
static int lg_http_feed(lg_http *h, const char *p, size_t n, char *err)
{
    while (n > 0 && h->st != LG_HTTP_DONE) {
        switch (h->st) {
        case LG_HTTP_HEAD: {
            /* Copy byte by byte until the blank line: heads are small. */
            size_t i = 0;
            bool end = false;
            while (i < n && !end) {
                if (h->n_head >= LG_MAX_HEAD_BYTES) {
                    lg_errf(err, "response head larger than %d bytes", LG_MAX_HEAD_BYTES);
                    return -1;
                }
                h->head[h->n_head++] = p[i++];
                h->head[h->n_head] = '\0';
                end = h->n_head >= 4 && memcmp(h->head + h->n_head - 4, "\r\n\r\n", 4) == 0;
            }
            p += i;
            n -= i;
            if (end && lg_http_parse_head(h, err) != 0) return -1;
            break;
        }
        case LG_HTTP_CHUNK_SIZE:
        case LG_HTTP_CHUNK_END:
        case LG_HTTP_TRAILER: {
            bool complete;
            size_t used = lg_http_line(h, p, n, &complete, err);
            if (used == SIZE_MAX) return -1;
            p += used;
            n -= used;
            if (!complete) break;
            h->n_line = 0;
            if (h->st == LG_HTTP_CHUNK_END) {
                if (h->line[0] != '\0') {
                    lg_errf(err, "chunk data not followed by CRLF");
                    return -1;
                }
                h->st = LG_HTTP_CHUNK_SIZE;
            } else if (h->st == LG_HTTP_TRAILER) {
                if (h->line[0] == '\0') h->st = LG_HTTP_DONE;
            } else {
                uint64_t size = 0;
                int n_digits = 0;
                const char *q = h->line;
                for (; *q != '\0' && *q != ';' && *q != ' ' && *q != '\t'; q++) {
                    int d = (*q >= '0' && *q <= '9')   ? *q - '0'
                            : (*q >= 'a' && *q <= 'f') ? *q - 'a' + 10
                            : (*q >= 'A' && *q <= 'F') ? *q - 'A' + 10
                                                       : -1;
                    if (d < 0 || ++n_digits > 15) {
                        lg_errf(err, "bad chunk size \"%.40s\"", h->line);
                        return -1;
                    }
                    size = size * 16 + (uint64_t)d;
                }
                if (n_digits == 0) {
                    lg_errf(err, "bad chunk size \"%.40s\"", h->line);
                    return -1;
                }
                h->left = size;
                h->st = size == 0 ? LG_HTTP_TRAILER : LG_HTTP_CHUNK_DATA;
            }
            break;
        }
        case LG_HTTP_CHUNK_DATA:
        case LG_HTTP_BODY_LENGTH:
        case LG_HTTP_BODY_CLOSE: {
            size_t take = n;
            if (h->st != LG_HTTP_BODY_CLOSE && h->left < take) take = (size_t)h->left;
            int k = h->sink(h->sink_ctx, p, take, err);
            if (k < 0) return -1;
            if (k > 0) {
                h->st = LG_HTTP_DONE;
                return 1;
            }
            p += take;
            n -= take;
            if (h->st != LG_HTTP_BODY_CLOSE) {
                h->left -= take;
                if (h->left == 0) {
                    h->st = h->st == LG_HTTP_CHUNK_DATA ? LG_HTTP_CHUNK_END : LG_HTTP_DONE;
                }
            }
            break;
        }
        case LG_HTTP_DONE:
            break;
        }
    }
    return h->st == LG_HTTP_DONE ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* One streaming request                                               */
/* ------------------------------------------------------------------ */

typedef struct lg_req {
    const lg_opts *o;
    int64_t t_start, t_first, t_prev, now; /* ns */
    int64_t n_events;       /* content events */
    int64_t n_usage;        /* usage.completion_tokens; -1: not seen */
    int64_t n_predicted;    /* timings.predicted_n; -1: not seen */
    double srv_ttft_ms;     /* timings.ttft_ms; -1: not seen */
    bool done;              /* [DONE] seen */
    bool refused;           /* the connection was refused */
    double *gaps_ms;        /* between consecutive content events */
    size_t n_gaps, cap_gaps;
    /* SSE: the line being read and the data of the event being read */
    char *line;
    size_t n_line, cap_line;
    char *data;
    size_t n_data, cap_data;
    bool has_data;
    /* the body of a response that is not 200 (start of it) */
    char body[LG_MAX_ERROR_BODY_BYTES + 1];
    size_t n_body;
} lg_req;

static int lg_grow(char **buf, size_t *cap, size_t need, char *err)
{
    if (need <= *cap) return 0;
    if (need > LG_MAX_EVENT_BYTES) {
        lg_errf(err, "an SSE event longer than %u bytes", LG_MAX_EVENT_BYTES);
        return -1;
    }
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    char *nb = realloc(*buf, nc);
    if (nb == NULL) {
        lg_errf(err, "out of memory");
        return -1;
    }
    *buf = nb;
    *cap = nc;
    return 0;
}

/* A short description of a JSON error object: {"error": {"message": ...}}. */
static void lg_error_object(json_t *e, char *out, size_t cap)
{
    json_t *msg = json_is_object(e) ? json_object_get(e, "message") : NULL;
    json_t *code = json_is_object(e) ? json_object_get(e, "code") : NULL;
    if (json_is_string(msg)) {
        snprintf(out, cap, "%s%s%.160s", json_is_string(code) ? json_string_value(code) : "",
                 json_is_string(code) ? ": " : "", json_string_value(msg));
    } else {
        snprintf(out, cap, "(an error without a message)");
    }
}

/* One complete SSE event (its data joined). 0, 1 at [DONE], -1 on error. */
static int lg_event(lg_req *r, char *err)
{
    if (r->n_data == 6 && memcmp(r->data, "[DONE]", 6) == 0) {
        r->done = true;
        return 1;
    }
    json_error_t je;
    json_t *j = json_loadb(r->data, r->n_data, 0, &je);
    if (j == NULL || !json_is_object(j)) {
        lg_errf(err, "malformed event: %s: \"%.60s\"", j ? "not an object" : je.text,
                r->n_data ? r->data : "");
        json_decref(j);
        return -1;
    }
    json_t *e = json_object_get(j, "error");
    if (e != NULL) {
        char msg[200];
        lg_error_object(e, msg, sizeof(msg));
        lg_errf(err, "error event: %s", msg);
        json_decref(j);
        return -1;
    }
    json_t *choices = json_object_get(j, "choices");
    if (!json_is_array(choices)) {
        lg_errf(err, "malformed event: no `choices` array");
        json_decref(j);
        return -1;
    }
    if (json_array_size(choices) > 0) {
        json_t *c = json_array_get(choices, 0);
        json_t *text = NULL;
        if (r->o->chat) {
            json_t *delta = json_object_get(c, "delta");
            text = json_is_object(delta) ? json_object_get(delta, "content") : NULL;
        } else {
            text = json_object_get(c, "text");
        }
        if (!json_is_object(c) || (text != NULL && !json_is_string(text) && !json_is_null(text))) {
            lg_errf(err, "malformed event: a choice without a text");
            json_decref(j);
            return -1;
        }
        if (json_is_string(text) && json_string_length(text) > 0) {
            if (r->n_events == 0) {
                r->t_first = r->now;
            } else {
                if (r->n_gaps == r->cap_gaps) {
                    size_t nc = r->cap_gaps ? r->cap_gaps * 2 : 64;
                    double *ng = realloc(r->gaps_ms, nc * sizeof(*ng));
                    if (ng == NULL) {
                        lg_errf(err, "out of memory");
                        json_decref(j);
                        return -1;
                    }
                    r->gaps_ms = ng;
                    r->cap_gaps = nc;
                }
                r->gaps_ms[r->n_gaps++] = (double)(r->now - r->t_prev) / 1e6;
            }
            r->t_prev = r->now;
            r->n_events++;
        }
    }
    json_t *usage = json_object_get(j, "usage");
    json_t *ct = json_is_object(usage) ? json_object_get(usage, "completion_tokens") : NULL;
    if (json_is_integer(ct) && json_integer_value(ct) >= 0) r->n_usage = json_integer_value(ct);
    json_t *timings = json_object_get(j, "timings");
    json_t *pn = json_is_object(timings) ? json_object_get(timings, "predicted_n") : NULL;
    if (json_is_integer(pn) && json_integer_value(pn) >= 0) r->n_predicted = json_integer_value(pn);
    json_t *tt = json_is_object(timings) ? json_object_get(timings, "ttft_ms") : NULL;
    if (json_is_number(tt) && json_number_value(tt) >= 0) r->srv_ttft_ms = json_number_value(tt);
    json_decref(j);
    return 0;
}

/* One SSE line (without its end). Only `data:` fields and blank lines
 * matter; comments (`: keep-alive`) and other fields are skipped. */
static int lg_sse_line(lg_req *r, const char *line, size_t n, char *err)
{
    if (n == 0) {
        if (!r->has_data) return 0;
        int k = lg_event(r, err);
        r->n_data = 0;
        r->has_data = false;
        return k;
    }
    if (n >= 5 && memcmp(line, "data:", 5) == 0) {
        const char *v = line + 5;
        size_t vn = n - 5;
        if (vn > 0 && *v == ' ') {
            v++;
            vn--;
        }
        size_t need = r->n_data + (r->has_data ? 1 : 0) + vn + 1;
        if (lg_grow(&r->data, &r->cap_data, need, err) != 0) return -1;
        if (r->has_data) r->data[r->n_data++] = '\n';
        memcpy(r->data + r->n_data, v, vn);
        r->n_data += vn;
        r->data[r->n_data] = '\0';
        r->has_data = true;
    }
    return 0;
}

static int lg_sse_sink(void *ctx, const char *p, size_t n, char *err)
{
    lg_req *r = ctx;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            size_t len = r->n_line;
            if (len > 0 && r->line[len - 1] == '\r') len--;
            int k = lg_sse_line(r, r->line ? r->line : "", len, err);
            r->n_line = 0;
            if (k != 0) return k;
        } else {
            if (lg_grow(&r->line, &r->cap_line, r->n_line + 1, err) != 0) return -1;
            r->line[r->n_line++] = p[i];
        }
    }
    return 0;
}

static int lg_body_sink(void *ctx, const char *p, size_t n, char *err)
{
    (void)err;
    lg_req *r = ctx;
    size_t room = LG_MAX_ERROR_BODY_BYTES - r->n_body;
    if (n > room) n = room;
    memcpy(r->body + r->n_body, p, n);
    r->n_body += n;
    r->body[r->n_body] = '\0';
    return 0;
}

/* Describes a non-200 response from its body: the OpenAI error message when
 * there is one, else the start of the body. */
static void lg_status_error(lg_req *r, int status, char *err)
{
    json_t *j = json_loadb(r->body, r->n_body, 0, NULL);
    json_t *e = json_is_object(j) ? json_object_get(j, "error") : NULL;
    if (e != NULL) {
        char msg[200];
        lg_error_object(e, msg, sizeof(msg));
        lg_errf(err, "HTTP %d: %s", status, msg);
    } else {
        for (size_t i = 0; i < r->n_body; i++) {
            if ((unsigned char)r->body[i] < 0x20) r->body[i] = ' ';
        }
        lg_errf(err, "HTTP %d: \"%.100s\"", status, r->body);
    }
    json_decref(j);
}

static void lg_req_free(lg_req *r)
{
    free(r->gaps_ms);
    free(r->line);
    free(r->data);
}

/* Sends `method path` with body (may be NULL) and reads the response into
 * r: an SSE stream when the status is 200 and stream is set, else the body
 * into r->body. Returns the HTTP status, or -1 with err filled. */
static int lg_exchange(const lg_opts *o, lg_req *r, const char *method, const char *path,
                       const char *body, bool stream, int64_t deadline_ns, char *err)
{
    size_t n_body = body ? strlen(body) : 0;
    char head[1024];
    char auth[600] = "";
    char length[96] = "";
    if (o->api_key != NULL) snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", o->api_key);
    if (body != NULL) {
        snprintf(length, sizeof(length),
                 "Content-Type: application/json\r\nContent-Length: %zu\r\n", n_body);
    }
    int hn = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                      "Accept: %s\r\n%s%s\r\n",
                      method, path, o->port, stream ? "text/event-stream" : "application/json",
                      auth, length);
    if (hn < 0 || (size_t)hn >= sizeof(head)) {
        lg_errf(err, "request head too long");
        return -1;
    }
    lg_http *h = calloc(1, sizeof(*h)); /* state LG_HTTP_HEAD */
    if (h == NULL) {
        lg_errf(err, "out of memory");
        return -1;
    }
    h->ok_sink = stream ? lg_sse_sink : lg_body_sink;
    h->other_sink = lg_body_sink;
    h->sink_ctx = r;
    int fd = lg_connect(o->port, deadline_ns, err);
    if (fd < 0) {
        r->refused = fd == -2;
        free(h);
        return -1;
    }
    int result = -1;
    if (lg_send_all(fd, head, (size_t)hn, deadline_ns, err) != 0 ||
        (body && lg_send_all(fd, body, n_body, deadline_ns, err) != 0)) {
        goto out;
    }
    char buf[16384];
    for (;;) {
        int w = lg_wait(fd, POLLIN, deadline_ns);
        if (w == 0) {
            lg_errf(err, "timed out after %g s (%s)", o->timeout_s,
                    h->st == LG_HTTP_HEAD ? "no response head" : "response not finished");
            break;
        }
        if (w < 0) {
            lg_errf(err, "poll: %s", strerror(errno));
            break;
        }
        ssize_t k = recv(fd, buf, sizeof(buf), 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (k < 0) {
            lg_errf(err, "receiving: %s", strerror(errno));
            break;
        }
        r->now = strata_clock_ns(); /* the arrival time of every event in buf */
        if (k == 0) {
            if (h->st == LG_HTTP_BODY_CLOSE) {
                result = h->status; /* a body delimited by the close */
            } else {
                lg_errf(err, "the server closed the connection %s",
                        h->st == LG_HTTP_HEAD ? "before a response" : "in the middle of the response");
            }
            break;
        }
        int f = lg_http_feed(h, buf, (size_t)k, err);
        if (f < 0) break;
        if (f > 0) {
            result = h->status;
            break;
        }
    }
out:
    close(fd);
    free(h);
    return result;
}

/* Runs request number i of the run; 0 when it succeeded (r holds its
 * figures), else -1 with err filled. */
static int lg_run_request(const lg_opts *o, int64_t i, lg_req *r, char *err)
{
    memset(r, 0, sizeof(*r));
    r->o = o;
    r->n_usage = -1;
    r->n_predicted = -1;
    r->srv_ttft_ms = -1;
    char *body = lg_request_body(o, i);
    if (body == NULL) {
        lg_errf(err, "out of memory");
        return -1;
    }
    r->t_start = strata_clock_ns();
    int64_t deadline = r->t_start + (int64_t)(o->timeout_s * 1e9);
    int status = lg_exchange(o, r, "POST", o->chat ? "/v1/chat/completions" : "/v1/completions",
                             body, true, deadline, err);
    free(body);
    if (status < 0) return -1;
    if (status != 200) {
        lg_status_error(r, status, err);
        return -1;
    }
    if (!r->done) {
        lg_errf(err, "the stream ended before `data: [DONE]`");
        return -1;
    }
    if (r->n_usage < 0 && r->n_predicted < 0) {
        lg_errf(err, "the stream carried no token count (usage or timings)");
        return -1;
    }
    return 0;
}

/* Generated tokens of a successful request. */
static int64_t lg_req_tokens(const lg_req *r)
{
    return r->n_usage >= 0 ? r->n_usage : r->n_predicted;
}

/* GET /health until it answers 200 or wait_s passes (checked once with
 * wait_s = 0). 0, or -1 with a message on stderr. */
static int lg_wait_health(const lg_opts *o)
{
    int64_t end = strata_clock_ns() + (int64_t)(o->wait_s * 1e9);
    char err[LG_ERR_MAX];
    for (;;) {
        lg_req r;
        memset(&r, 0, sizeof(r));
        r.o = o;
        int64_t deadline = strata_clock_ns() + (int64_t)(fmin(o->timeout_s, 10.0) * 1e9);
        int status = lg_exchange(o, &r, "GET", "/health", NULL, false, deadline, err);
        if (status == 200) {
            lg_req_free(&r);
            return 0;
        }
        if (status > 0) lg_status_error(&r, status, err);
        lg_req_free(&r);
        if (strata_clock_ns() >= end) {
            fprintf(stderr, "loadgen: the server at 127.0.0.1:%d is not ready: %s\n", o->port, err);
            return -1;
        }
        usleep(200 * 1000);
    }
}

/* ------------------------------------------------------------------ */
/* A concurrency level                                                 */
/* ------------------------------------------------------------------ */

typedef struct lg_level {
    const lg_opts *o;
    int concurrency;
    int64_t base_index;   /* request numbers of this level start here */
    int64_t deadline_ns;  /* no new request after this; INT64_MAX: none */
    atomic_int_fast64_t next;
    atomic_bool gone;     /* a connection was refused: the server is gone */
    pthread_mutex_t lock; /* protects everything below */
    int64_t n_ok, n_err, sum_tokens, sum_events;
    double *ttft_ms;
    size_t n_ttft, cap_ttft;
    double *srv_ttft_ms;
    size_t n_srv_ttft, cap_srv_ttft;
    double *itl_ms;
    size_t n_itl, cap_itl;
    uint64_t itl_seen, rng;
    char errs[LG_N_ERROR_KINDS][LG_ERR_MAX]; /* distinct error messages */
    int64_t n_errs_of[LG_N_ERROR_KINDS];       /* how many times each */
    int n_err_kinds;
    bool oom;
} lg_level;

static bool lg_push(double **v, size_t *n, size_t *cap, double x)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        double *nv = realloc(*v, nc * sizeof(*nv));
        if (nv == NULL) return false;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = x;
    return true;
}

/* Reservoir sampling keeps memory bounded on long --duration runs: each
 * sample seen is kept with probability LG_MAX_ITL_SAMPLES / seen. */
static void lg_level_add_itl(lg_level *L, double x)
{
    L->itl_seen++;
    if (L->n_itl < LG_MAX_ITL_SAMPLES) {
        if (!lg_push(&L->itl_ms, &L->n_itl, &L->cap_itl, x)) L->oom = true;
        return;
    }
    L->rng ^= L->rng << 13; /* xorshift64 */
    L->rng ^= L->rng >> 7;
    L->rng ^= L->rng << 17;
    uint64_t j = L->rng % L->itl_seen;
    if (j < LG_MAX_ITL_SAMPLES) L->itl_ms[j] = x;
}

/* Adds one request's outcome: rc 0 (its figures in r) or not (err). */
static void lg_level_record(lg_level *L, const lg_req *r, int rc, const char *err)
{
    pthread_mutex_lock(&L->lock);
    if (rc != 0) {
        L->n_err++;
        char msg[LG_ERR_MAX];
        snprintf(msg, sizeof(msg), "%s", err);
        for (char *c = msg; *c != '\0'; c++) {
            if ((unsigned char)*c < 0x20) *c = ' '; /* one line on the terminal */
        }
        int k = 0;
        while (k < L->n_err_kinds && strcmp(L->errs[k], msg) != 0) k++;
        if (k == L->n_err_kinds && k < LG_N_ERROR_KINDS) {
            memcpy(L->errs[k], msg, sizeof(msg));
            L->n_err_kinds++;
        }
        if (k < L->n_err_kinds) L->n_errs_of[k]++;
        pthread_mutex_unlock(&L->lock);
        return;
    }
    int64_t n_tok = lg_req_tokens(r);
    L->n_ok++;
    L->sum_tokens += n_tok;
    L->sum_events += r->n_events;
    if (r->n_events > 0) {
        if (!lg_push(&L->ttft_ms, &L->n_ttft, &L->cap_ttft, (double)(r->t_first - r->t_start) / 1e6)) {
            L->oom = true;
        }
    }
    if (r->srv_ttft_ms >= 0 && n_tok > 0 &&
        !lg_push(&L->srv_ttft_ms, &L->n_srv_ttft, &L->cap_srv_ttft, r->srv_ttft_ms)) {
        L->oom = true;
    }
    if (r->n_gaps > 0 && n_tok >= 2) {
        /* E content events for N tokens: each of the E-1 gaps stands for
         * (N-1)/(E-1) tokens (see the top of the file); never below 1. */
        double per_gap = (double)(n_tok - 1) / (double)r->n_gaps;
        if (per_gap < 1.0) per_gap = 1.0;
        for (size_t k = 0; k < r->n_gaps; k++) lg_level_add_itl(L, r->gaps_ms[k] / per_gap);
    }
    pthread_mutex_unlock(&L->lock);
}

static void *lg_worker(void *arg)
{
    lg_level *L = arg;
    const lg_opts *o = L->o;
    for (;;) {
        if (strata_clock_ns() >= L->deadline_ns || atomic_load(&L->gone)) break;
        int64_t k = atomic_fetch_add(&L->next, 1);
        if (k >= o->n_requests) break;
        lg_req r;
        char err[LG_ERR_MAX] = "";
        int rc = lg_run_request(o, L->base_index + k, &r, err);
        /* A server that refuses connections has exited or crashed: the
         * level stops rather than spin on refusals. */
        if (r.refused) atomic_store(&L->gone, true);
        lg_level_record(L, &r, rc, err);
        lg_req_free(&r);
    }
    return NULL;
}

static int lg_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v: the smallest value with at least p %
 * of the samples at or below it. */
static double lg_percentile(const double *v, size_t n, double p)
{
    if (n == 0) return NAN;
    size_t rank = (size_t)ceil(p / 100.0 * (double)n);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

static void lg_print_ms(double x)
{
    if (isnan(x)) printf(" - |");
    else printf(" %.2f |", x);
}

/* Runs one level and prints its row; 0, or -1 when it could not run all
 * its threads. *gone when the server stopped accepting connections. */
static int lg_run_level(const lg_opts *o, int concurrency, int64_t base_index, int64_t *n_issued,
                        int64_t *n_errors, bool *gone)
{
    lg_level *L = calloc(1, sizeof(*L));
    pthread_t *th = calloc((size_t)concurrency, sizeof(*th));
    if (L == NULL || th == NULL) {
        free(L);
        free(th);
        fprintf(stderr, "loadgen: out of memory\n");
        return -1;
    }
    L->o = o;
    L->concurrency = concurrency;
    L->base_index = base_index;
    L->rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)concurrency;
    atomic_init(&L->next, 0);
    atomic_init(&L->gone, false);
    pthread_mutex_init(&L->lock, NULL);
    int64_t t0 = strata_clock_ns();
    L->deadline_ns = o->duration_s > 0 ? t0 + (int64_t)(o->duration_s * 1e9) : INT64_MAX;
    int n_started = 0;
    for (int i = 0; i < concurrency; i++) {
        if (pthread_create(&th[i], NULL, lg_worker, L) != 0) break;
        n_started++;
    }
    for (int i = 0; i < n_started; i++) pthread_join(th[i], NULL);
    double wall_s = (double)(strata_clock_ns() - t0) / 1e9;
    int rc = 0;
    if (n_started < concurrency) {
        fprintf(stderr, "loadgen: could start only %d of %d client threads\n", n_started,
                concurrency);
        rc = -1;
    }
    if (L->oom) fprintf(stderr, "loadgen: out of memory while keeping samples; figures incomplete\n");
    if (L->n_ttft > 0) qsort(L->ttft_ms, L->n_ttft, sizeof(double), lg_cmp_double);
    if (L->n_srv_ttft > 0) qsort(L->srv_ttft_ms, L->n_srv_ttft, sizeof(double), lg_cmp_double);
    if (L->n_itl > 0) qsort(L->itl_ms, L->n_itl, sizeof(double), lg_cmp_double);
    int64_t n_req = L->n_ok + L->n_err;
    printf("| %d | %" PRId64 " | %" PRId64 " | %.2f | %.2f | %.1f |", concurrency, n_req, L->n_err,
           wall_s, wall_s > 0 ? (double)L->n_ok / wall_s : 0.0,
           wall_s > 0 ? (double)L->sum_tokens / wall_s : 0.0);
    lg_print_ms(lg_percentile(L->ttft_ms, L->n_ttft, 50));
    lg_print_ms(lg_percentile(L->ttft_ms, L->n_ttft, 99));
    lg_print_ms(lg_percentile(L->srv_ttft_ms, L->n_srv_ttft, 50));
    lg_print_ms(lg_percentile(L->srv_ttft_ms, L->n_srv_ttft, 99));
    lg_print_ms(lg_percentile(L->itl_ms, L->n_itl, 50));
    lg_print_ms(lg_percentile(L->itl_ms, L->n_itl, 99));
    if (L->sum_events > 0) printf(" %.2f |\n", (double)L->sum_tokens / (double)L->sum_events);
    else printf(" - |\n");
    fflush(stdout);
    int64_t n_listed = 0;
    for (int i = 0; i < L->n_err_kinds; i++) {
        fprintf(stderr, "loadgen: concurrency %d: %" PRId64 " x %s\n", concurrency, L->n_errs_of[i],
                L->errs[i]);
        n_listed += L->n_errs_of[i];
    }
    if (L->n_err > n_listed) {
        fprintf(stderr, "loadgen: concurrency %d: %" PRId64 " other errors\n", concurrency,
                L->n_err - n_listed);
    }
    *n_issued = atomic_load(&L->next);
    *gone = atomic_load(&L->gone);
    *n_errors = L->n_err;
    pthread_mutex_destroy(&L->lock);
    free(L->ttft_ms);
    free(L->srv_ttft_ms);
    free(L->itl_ms);
    free(L);
    free(th);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Options                                                             */
/* ------------------------------------------------------------------ */

static void lg_usage(FILE *f)
{
    fprintf(f,
            "usage: loadgen [options]\n"
            "  --port P            the server's port on 127.0.0.1 (default 8080)\n"
            "  --host 127.0.0.1    only 127.0.0.1 (or localhost) is accepted\n"
            "  -c LIST             concurrency levels, e.g. 1,4,16 (default 1,4,16; each 1..%d)\n"
            "  --requests N        requests per level (default 64; at most %d)\n"
            "  --duration S        seconds per level (at most %.0f); no new request after that\n"
            "  --max-tokens N      max_tokens of each request (default 64)\n"
            "  --api-key KEY       send `Authorization: Bearer KEY`\n"
            "  --model NAME        send `model` (default: none, the server's model)\n"
            "  --chat              use /v1/chat/completions (default /v1/completions)\n"
            "  --prompt-file F     one prompt per non-empty line, used in turn\n"
            "                      (default: built-in story openings, distinct per request)\n"
            "  --temperature T     default 0.8; request i has seed --seed + i\n"
            "  --seed S            default 1\n"
            "  --ban-token ID      logit_bias -100 for token ID (e.g. the EOS id, so every\n"
            "                      request generates max_tokens)\n"
            "  --logit-bias ID=B   logit_bias B (-100..100) for token ID, e.g. +100 on a few\n"
            "                      printable tokens so that a random-weight model prints text;\n"
            "                      with --ban-token, up to %d tokens in all\n"
            "  --timeout S         limit on each request, whole (default 120)\n"
            "  --warmup N          requests before the first level, not counted (default 1)\n"
            "  --wait S            wait up to S seconds for /health to answer 200 (default 0:\n"
            "                      check once)\n",
            LG_MAX_CONCURRENCY, LG_MAX_REQUESTS, LG_MAX_DURATION_S, LG_MAX_BIASES);
}

static bool lg_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (s == NULL || *s == '\0') return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno != 0 || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool lg_parse_f64(const char *s, double lo, double hi, double *out)
{
    if (s == NULL || *s == '\0') return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v) || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool lg_parse_levels(const char *s, lg_opts *o)
{
    o->n_levels = 0;
    const char *p = s;
    for (;;) {
        char item[32];
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n == 0 || n >= sizeof(item) || o->n_levels == LG_MAX_LEVELS) return false;
        memcpy(item, p, n);
        item[n] = '\0';
        int64_t v;
        if (!lg_parse_i64(item, 1, LG_MAX_CONCURRENCY, &v)) return false;
        o->levels[o->n_levels++] = (int)v;
        if (comma == NULL) return true;
        p = comma + 1;
    }
}

/* 0, or 2 (bad usage; message printed). */
static int lg_parse_args(int argc, char **argv, lg_opts *o)
{
    bool had_requests = false, had_duration = false;
    const char *prompt_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            lg_usage(stdout);
            exit(0);
        }
        if (strcmp(a, "--chat") == 0) {
            o->chat = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "loadgen: %s needs a value\n", a);
            return 2;
        }
        i++;
        int64_t n = 0;
        bool ok = true;
        if (strcmp(a, "--port") == 0) {
            ok = lg_parse_i64(v, 1, 65535, &n);
            o->port = (int)n;
        } else if (strcmp(a, "--host") == 0) {
            if (strcmp(v, "127.0.0.1") != 0 && strcmp(v, "localhost") != 0) {
                fprintf(stderr, "loadgen: refusing host \"%s\": it only connects to 127.0.0.1\n", v);
                return 2;
            }
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--concurrency") == 0) {
            ok = lg_parse_levels(v, o);
        } else if (strcmp(a, "--requests") == 0 || strcmp(a, "-n") == 0) {
            ok = lg_parse_i64(v, 1, LG_MAX_REQUESTS, &o->n_requests);
            had_requests = true;
        } else if (strcmp(a, "--duration") == 0) {
            ok = lg_parse_f64(v, 0.001, LG_MAX_DURATION_S, &o->duration_s);
            had_duration = true;
        } else if (strcmp(a, "--max-tokens") == 0) {
            ok = lg_parse_i64(v, 1, LG_MAX_MAX_TOKENS, &n);
            o->max_tokens = (int)n;
        } else if (strcmp(a, "--api-key") == 0) {
            ok = strlen(v) > 0 && strlen(v) < 512 && strpbrk(v, "\r\n") == NULL;
            o->api_key = v;
        } else if (strcmp(a, "--model") == 0) {
            ok = strlen(v) > 0;
            o->model = v;
        } else if (strcmp(a, "--prompt-file") == 0) {
            prompt_file = v;
        } else if (strcmp(a, "--temperature") == 0) {
            ok = lg_parse_f64(v, 0, 100, &o->temperature);
        } else if (strcmp(a, "--seed") == 0) {
            ok = lg_parse_i64(v, 0, INT64_MAX / 2, &n);
            o->seed = (uint64_t)n;
        } else if (strcmp(a, "--ban-token") == 0 || strcmp(a, "--logit-bias") == 0) {
            /* --ban-token ID, --logit-bias ID=B */
            bool is_ban = strcmp(a, "--ban-token") == 0;
            char id[32];
            const char *eq = strchr(v, '=');
            double bias = -100;
            size_t n_id = eq ? (size_t)(eq - v) : strlen(v);
            ok = o->n_biases < LG_MAX_BIASES && n_id < sizeof(id) && is_ban == (eq == NULL);
            if (ok) {
                memcpy(id, v, n_id);
                id[n_id] = '\0';
                ok = lg_parse_i64(id, 0, INT32_MAX, &n) &&
                     (eq == NULL || lg_parse_f64(eq + 1, -100, 100, &bias));
            }
            if (ok) {
                o->bias_ids[o->n_biases] = (int)n;
                o->biases[o->n_biases++] = bias;
            }
        } else if (strcmp(a, "--timeout") == 0) {
            ok = lg_parse_f64(v, 0.1, LG_MAX_TIMEOUT_S, &o->timeout_s);
        } else if (strcmp(a, "--warmup") == 0) {
            ok = lg_parse_i64(v, 0, 1000, &n);
            o->warmup = (int)n;
        } else if (strcmp(a, "--wait") == 0) {
            ok = lg_parse_f64(v, 0, LG_MAX_WAIT_S, &o->wait_s);
        } else {
            fprintf(stderr, "loadgen: unknown option %s\n", a);
            lg_usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "loadgen: bad value for %s: \"%s\"\n", a, v);
            return 2;
        }
    }
    /* --duration alone: as many requests as fit, up to the bound. */
    if (had_duration && !had_requests) o->n_requests = LG_MAX_REQUESTS;
    if (prompt_file != NULL && lg_load_prompts(o, prompt_file) != 0) return 2;
    return 0;
}

int main(int argc, char **argv)
{
    lg_opts o = {
        .port = 8080, .max_tokens = 64, .n_requests = 64, .timeout_s = 120,
        .temperature = 0.8, .seed = 1, .warmup = 1, .levels = {1, 4, 16}, .n_levels = 3,
    };
    int rc = lg_parse_args(argc, argv, &o);
    if (rc != 0) return rc;
    signal(SIGPIPE, SIG_IGN);
    int status = 0;
    if (lg_wait_health(&o) != 0) {
        status = 1;
        goto out;
    }
    int64_t next_index = 0;
    for (int i = 0; i < o.warmup; i++) {
        lg_req r;
        char err[LG_ERR_MAX] = "";
        int rc_warm = lg_run_request(&o, next_index++, &r, err);
        lg_req_free(&r);
        if (rc_warm != 0) {
            fprintf(stderr, "loadgen: the warm-up request failed: %s\n", err);
            status = 1;
            goto out;
        }
    }
    printf("loadgen: 127.0.0.1:%d %s, max_tokens %d, temperature %g, ",
           o.port, o.chat ? "/v1/chat/completions" : "/v1/completions", o.max_tokens,
           o.temperature);
    if (o.duration_s > 0 && o.n_requests == LG_MAX_REQUESTS) printf("%g s per level", o.duration_s);
    else if (o.duration_s > 0) printf("%" PRId64 " requests or %g s per level", o.n_requests, o.duration_s);
    else printf("%" PRId64 " requests per level", o.n_requests);
    printf(", %s prompts\n\n", o.prompts ? "file" : "built-in");
    printf("| concurrency | requests | errors | wall s | req/s | gen tok/s | TTFT p50 ms | "
           "TTFT p99 ms | server TTFT p50 ms | server TTFT p99 ms | ITL p50 ms | ITL p99 ms | "
           "tok/event |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);
    for (int i = 0; i < o.n_levels; i++) {
        int64_t issued = 0, n_err = 0;
        bool gone = false;
        if (lg_run_level(&o, o.levels[i], next_index, &issued, &n_err, &gone) != 0) status = 1;
        if (n_err > 0) status = 1;
        next_index += issued;
        if (gone) {
            fprintf(stderr, "loadgen: the server refused a connection; stopping\n");
            break;
        }
    }
out:
    free(o.prompts);
    free(o.prompt_buf);
    return status;
}
