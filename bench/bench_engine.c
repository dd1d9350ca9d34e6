/* bench_engine: aggregate generation throughput of one `strata engine`
 * process with 1, 4 and 8 concurrent requests, driven over its real
 * protocol pipes, printed as a table.
 *
 *   bench_engine [-m MODEL.gguf] [-t THREADS] [-n TOKENS] [-p PROMPT_TOKENS]
 *                [-c 1,4,8] [--strata PATH]
 *
 * Each round sends C gen requests at once (different prompts, greedy,
 * ignore_eos so every request generates exactly -n tokens) to an engine
 * started with --slots = the largest C, and measures the wall time from
 * the first line written to the last `done` read. Aggregate tok/s is all
 * generated tokens over that time; "decode-phase" leaves out the prefill
 * (the round's time minus the longest prompt_ms, and each request's first
 * token, which the prefill step produced); "per request" is the mean of
 * each request's own predicted_n / predicted_ms from its `done` stats;
 * "engine CPU s" is the CPU time (user + system, all threads) the engine
 * process used in the round, from /proc, and "tok/CPU-s" the generated
 * tokens over it: on a machine shared with other work, where wall time
 * says little, that ratio between rows still shows what batching buys
 * (idle pool threads that wait without spinning cost nothing). The "x"
 * after a row is its aggregate tok/s over the first row's, then the same
 * for tok/CPU-s. One warm-up request runs first (page-in of the weights).
 *
 * Without -m it uses build/models/llama-1b-Q4_0.gguf, making it first with
 * `strata mkmodel --preset llama-1b --type Q4_0` when absent (a few
 * minutes). Figures, not a test: nothing here asserts on speed. */
#define _GNU_SOURCE
#include "base/clock.h"
#include "engine/protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef STRATA_BIN
#define STRATA_BIN "strata"
#endif
#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

typedef struct child {
    pid_t pid;
    int in_fd, out_fd;
    proto_reader r;
} child;

static int child_start(child *c, const char *const *argv)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return -1;
    c->pid = fork();
    if (c->pid < 0) return -1;
    if (c->pid == 0) {
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0) _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->in_fd = in[1];
    c->out_fd = out[0];
    proto_reader_init(&c->r, 0);
    return 0;
}

static int child_write(child *c, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(c->in_fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The next decoded message; -1 at end of output or on a bad line. */
static int child_next(child *c, proto_msg *m)
{
    for (;;) {
        const char *line;
        size_t len;
        int k = proto_reader_next(&c->r, &line, &len);
        if (k == PROTO_READ_LINE) {
            proto_error pe;
            if (proto_decode(line, len, PROTO_DIR_TO_SERVER, m, &pe) != 0) {
                fprintf(stderr, "bench_engine: bad line from the engine: %s\n", pe.message);
                return -1;
            }
            return 0;
        }
        if (k == PROTO_READ_EOF || k == PROTO_READ_TOO_LONG) return -1;
        strata_err err;
        if (proto_reader_fill(&c->r, c->out_fd, &err) < 0) return -1;
    }
}

static int child_finish(child *c)
{
    close(c->in_fd); /* end of input: the engine finishes and exits */
    proto_msg m;
    while (child_next(c, &m) == 0) proto_msg_free(&m);
    int status;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(c->out_fd);
    proto_reader_free(&c->r);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* CPU seconds (user + system, all threads) process pid has used; -1 when
 * /proc cannot tell. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the parenthesised name: state is field 3, utime 14,
     * stime 15 */
    const char *p = strrchr(buf, ')');
    if (p == NULL) return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? (double)(ut + st) / (double)hz : -1;
}

typedef struct round_result {
    int n_req;
    int64_t n_tokens;
    double wall_ms;
    double mean_req_tps;
    double mean_prompt_ms;
    double max_prompt_ms;
    double cpu_s; /* the engine's CPU time in the round; < 0: unknown */
} round_result;

/* Sends n_req gens at once (ids from *next_id) and waits for their done. */
static int run_round(child *c, int n_req, int n_prompt, int n_gen, int64_t n_vocab,
                     int64_t *next_id, round_result *res)
{
    proto_buf buf = {0};
    int64_t first_id = *next_id;
    int32_t *prompt = malloc((size_t)n_prompt * sizeof(int32_t));
    if (prompt == NULL) return -1;
    for (int i = 0; i < n_req; i++) {
        /* a different prompt per request: ids spread over the vocabulary */
        for (int k = 0; k < n_prompt; k++) {
            prompt[k] = (int32_t)((1000 + (int64_t)(i * 7919 + k * 104729)) % n_vocab);
        }
        proto_msg m = {.op = PROTO_OP_GEN, .has_id = true, .id = (*next_id)++};
        m.u.gen.tokens = prompt;
        m.u.gen.n_tokens = (size_t)n_prompt;
        m.u.gen.max_tokens = n_gen;
        m.u.gen.sampling = proto_sampling_default();
        m.u.gen.sampling.temperature = 0;
        m.u.gen.ignore_eos = true;
        m.u.gen.logprobs = -1;
        strata_err err;
        if (proto_encode(&m, &buf, &err) != 0) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            free(prompt);
            return -1;
        }
    }
    free(prompt);
    const double cpu0 = proc_cpu_s(c->pid);
    double t0 = strata_clock_ms();
    if (child_write(c, buf.data, buf.len) != 0) {
        proto_buf_free(&buf);
        return -1;
    }
    proto_buf_free(&buf);
    memset(res, 0, sizeof(*res));
    res->n_req = n_req;
    int n_done = 0;
    while (n_done < n_req) {
        proto_msg m;
        if (child_next(c, &m) != 0) return -1;
        if (m.op == PROTO_OP_ERR) {
            fprintf(stderr, "bench_engine: engine error %s: %s\n", m.u.err.code, m.u.err.message);
            proto_msg_free(&m);
            return -1;
        }
        if (m.op == PROTO_OP_DONE && m.id >= first_id && m.id < *next_id) {
            const proto_stats *s = &m.u.done.stats;
            res->n_tokens += s->predicted_n;
            if (s->predicted_ms > 0) {
                res->mean_req_tps += (double)s->predicted_n * 1000.0 / s->predicted_ms / n_req;
            }
            res->mean_prompt_ms += s->prompt_ms / n_req;
            if (s->prompt_ms > res->max_prompt_ms) res->max_prompt_ms = s->prompt_ms;
            n_done++;
        }
        proto_msg_free(&m);
    }
    res->wall_ms = strata_clock_ms() - t0;
    const double cpu1 = proc_cpu_s(c->pid);
    res->cpu_s = cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1;
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_engine [-m MODEL.gguf] [-t THREADS] [-n TOKENS] "
                    "[-p PROMPT_TOKENS] [-c 1,4,8] [--strata PATH]\n");
}

int main(int argc, char **argv)
{
    const char *model_path = NULL, *strata = STRATA_BIN, *conc_list = "1,4,8";
    int threads = 2, n_gen = 32, n_prompt = 16;
    for (int i = 1; i < argc; i += 2) { /* option, value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            usage();
            return 2;
        }
        if (strcmp(a, "-m") == 0) model_path = v;
        else if (strcmp(a, "-t") == 0) threads = atoi(v);
        else if (strcmp(a, "-n") == 0) n_gen = atoi(v);
        else if (strcmp(a, "-p") == 0) n_prompt = atoi(v);
        else if (strcmp(a, "-c") == 0) conc_list = v;
        else if (strcmp(a, "--strata") == 0) strata = v;
        else {
            usage();
            return 2;
        }
    }
    if (threads < 1 || n_gen < 1 || n_prompt < 1) {
        usage();
        return 2;
    }
    int conc[16], n_conc = 0, max_conc = 1;
    for (const char *p = conc_list; *p && n_conc < 16;) {
        conc[n_conc] = atoi(p);
        if (conc[n_conc] < 1) {
            usage();
            return 2;
        }
        if (conc[n_conc] > max_conc) max_conc = conc[n_conc];
        n_conc++;
        p = strchr(p, ',');
        if (p == NULL) break;
        p++;
    }
    char default_model[4096];
    if (model_path == NULL) {
        snprintf(default_model, sizeof(default_model), "%s/build/models/llama-1b-Q4_0.gguf",
                 STRATA_SOURCE_DIR);
        model_path = default_model;
        struct stat st;
        if (stat(model_path, &st) != 0) {
            char cmd[8400];
            snprintf(cmd, sizeof(cmd),
                     "mkdir -p '%s/build/models' && '%s' mkmodel --preset llama-1b --type Q4_0 "
                     "-o '%s'",
                     STRATA_SOURCE_DIR, strata, model_path);
            fprintf(stderr, "bench_engine: making %s (once, a few minutes)\n", model_path);
            if (system(cmd) != 0) {
                fprintf(stderr, "bench_engine: mkmodel failed\n");
                return 1;
            }
        }
    }
    signal(SIGPIPE, SIG_IGN);
    char slots[16], th[16], ctx[32];
    snprintf(slots, sizeof(slots), "%d", max_conc);
    snprintf(th, sizeof(th), "%d", threads);
    snprintf(ctx, sizeof(ctx), "%d", n_prompt + n_gen + 32);
    const char *args[] = {strata, "engine", "-m", model_path, "--slots", slots, "--ctx", ctx,
                          "-t", th, NULL};
    child c;
    if (child_start(&c, args) != 0) {
        fprintf(stderr, "bench_engine: cannot start %s\n", strata);
        return 1;
    }
    proto_msg ready;
    if (child_next(&c, &ready) != 0 || ready.op != PROTO_OP_READY) {
        fprintf(stderr, "bench_engine: the engine did not start\n");
        return 1;
    }
    int64_t n_vocab = ready.u.ready.n_vocab;
    printf("model: %s (%s, vocab %" PRId64 ", %" PRId64 " layers)\n", model_path,
           ready.u.ready.arch, n_vocab, ready.u.ready.n_layer);
    printf("engine: %d slots, %d threads; each request: %d prompt tokens, %d generated "
           "(greedy, ignore_eos)\n\n",
           max_conc, threads, n_prompt, n_gen);
    proto_msg_free(&ready);

    int64_t next_id = 1;
    round_result warm;
    if (run_round(&c, 1, n_prompt, 4, n_vocab, &next_id, &warm) != 0) {
        fprintf(stderr, "bench_engine: warm-up failed\n");
        return 1;
    }
    printf("| concurrent | generated tokens | wall s | aggregate tok/s | decode-phase tok/s "
           "| per request tok/s | mean prompt ms | engine CPU s | tok/CPU-s |\n");
    printf("|-----------:|-----------------:|-------:|----------------:|-------------------:"
           "|------------------:|---------------:|-------------:|----------:|\n");
    double base = 0, base_cpu = 0;
    for (int i = 0; i < n_conc; i++) {
        round_result r;
        if (run_round(&c, conc[i], n_prompt, n_gen, n_vocab, &next_id, &r) != 0) {
            fprintf(stderr, "bench_engine: round with %d requests failed\n", conc[i]);
            return 1;
        }
        double agg = (double)r.n_tokens * 1000.0 / r.wall_ms;
        /* All prompts fit one step's budget here, so they are prefilled in
         * the first step(s); each request's first token comes from that.
         * The decode phase is the rest of the round. */
        double decode_ms = r.wall_ms - r.max_prompt_ms;
        double dec = decode_ms > 0 ? (double)(r.n_tokens - r.n_req) * 1000.0 / decode_ms : 0.0;
        double per_cpu = r.cpu_s > 0 ? (double)r.n_tokens / r.cpu_s : 0.0;
        if (i == 0) base = agg, base_cpu = per_cpu;
        printf("| %10d | %16" PRId64 " | %6.2f | %15.2f | %18.2f | %17.2f | %14.1f | %12.2f | %9.2f |",
               conc[i], r.n_tokens, r.wall_ms / 1000.0, agg, dec, r.mean_req_tps,
               r.mean_prompt_ms, r.cpu_s, per_cpu);
        if (i > 0 && base > 0) printf(" x%.2f", agg / base);
        if (i > 0 && base_cpu > 0) printf(" x%.2f", per_cpu / base_cpu);
        printf("\n");
        fflush(stdout);
    }
    int status = child_finish(&c);
    if (status != 0) fprintf(stderr, "bench_engine: the engine exited with %d\n", status);
    return status == 0 ? 0 : 1;
}
