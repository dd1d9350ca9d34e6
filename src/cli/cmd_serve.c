/* `strata serve -m MODEL.gguf ...`: the OpenAI-compatible HTTP server over N
 * engine processes (src/serve/). This file parses options, loads what the
 * server needs from the GGUF's metadata (vocab, chat template; never the
 * weights), starts the pool and the HTTP server, and handles SIGTERM/SIGINT:
 * stop accepting, let in-flight requests finish up to --drain-timeout, stop
 * the engines, exit 0.
 *
 * Threads: the main thread only waits for signals (sigwait); every other
 * thread is created with SIGTERM/SIGINT blocked. */
#define _GNU_SOURCE
#include "cli.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "gguf/gguf.h"
#include "model/kv_cache.h"
#include "serve/pool.h"
#include "serve/reasoning.h"
#include "serve/server.h"
#include "serve/tool_calls.h"
#include "text/chat_template.h"
#include "text/vocab.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void serve_usage(FILE *f)
{
    fprintf(f,
            "usage: strata serve -m MODEL.gguf [--replicas N] [--slots K] [--ctx C]\n"
            "                    [--host 127.0.0.1] [--port 8080] [--api-key KEY | --api-key-file F]\n"
            "                    [--max-queue Q] [-t THREADS] [--chat-template-file F]\n\n"
            "  -m, --model F          the GGUF model\n"
            "  --replicas N           engine processes (default 1)\n"
            "  --slots K              requests each engine runs at once (default 4)\n"
            "  --ctx C                context per request (default: the engine's)\n"
            "  --kv-type T            KV cache rows of the engines: f16 (default) or q8_0\n"
            "  --prefix-cache-mib M   the engines' prefix cache budget in MiB (default: the\n"
            "                         whole KV pool; 0: off)\n"
            "  --prefix-min-tokens T  fewest prompt tokens taken from the cache (default 32)\n"
            "  --batch B              token budget of one engine step (default: the engine's)\n"
            "  --kv-max N, --kv-max-mib M, --kv-init N, --kv-step N, --kv-hold-ms MS,\n"
            "  --kv-resident N        the engines' shared KV pool (see `strata engine --help`)\n"
            "  --draft-ngram          speculative decoding with n-gram drafts in the engines;\n"
            "  --draft-model F        or with the draft model F (same vocabulary) in each engine;\n"
            "  --draft-max N, --draft-min N, --draft-p-min P  its limits (default 4, 1, 0.5);\n"
            "  --draft-gate on|off    drafts only where the engine's step times say they pay\n"
            "                         (default on; see `strata engine --help`);\n"
            "                         requests opt out with `speculative: false`\n"
            "  --host A, --port P     where to listen (default 127.0.0.1:8080; port 0: any)\n"
            "  --api-key KEY          require `Authorization: Bearer KEY` (all but /health)\n"
            "  --api-key-file F       the key from the first line of F\n"
            "  --max-queue Q          requests that may wait for a slot (default 64); more: 429\n"
            "  -t, --threads N        threads per engine (default: the CPUs / replicas)\n"
            "  --chat-template-file F a Jinja chat template instead of the model's\n"
            "  --allowed-origins L    pages whose origin may call the API from a browser\n"
            "                         (CORS): * (default: any), none, or a comma list\n"
            "  --alias NAME, --served-model-name NAME  the model's name in /v1/models and\n"
            "                         in requests (repeat for more names; the first is\n"
            "                         reported; default: the file's name without .gguf)\n"
            "  --reasoning-format auto|none  auto (default): a reasoning model's thinking\n"
            "                         (<think>...</think>, gpt-oss's analysis channel) is\n"
            "                         returned as `reasoning_content`; none: left in `content`\n"
            "  --max-body-bytes N     largest request body (default 8 MiB); more: 413\n"
            "  --drain-timeout MS     on SIGTERM, how long in-flight requests may finish (10000)\n"
            "  --port-file F          write the port listened on to F (for scripts)\n"
            "  --engine PATH          the engine executable (default: this strata, `engine`)\n"
            "  --ping-timeout MS      an engine silent this long is restarted (default 10000)\n"
            "  --wedge-floor-ms MS    the watchdog: an engine with work in flight whose step\n"
            "                         has run MS + its tokens x the per-token allowance, or\n"
            "                         that completes no step for MS with none running, is\n"
            "                         restarted (default %d; 0: off)\n"
            "  --wedge-per-token-ms X the per-token allowance, fixed (default: learned,\n"
            "                         %g x the engine's slowest recent ms per token)\n"
            "  --route prefix|load    prefix (default): the replica expected to hold the\n"
            "                         longest prefix of the prompt in its cache; load: the\n"
            "                         one with the most free slots\n"
            "  --route-balance N      prefix routing waits for the prefix replica while its\n"
            "                         requests (running + waiting for it) exceed the least\n"
            "                         loaded replica's by at most N, else takes the least\n"
            "                         loaded one (default %d)\n",
            POOL_WEDGE_FLOOR_MS, POOL_WEDGE_FACTOR, POOL_ROUTE_BALANCE);
}

static char *read_text_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rbe");
    if (f == NULL) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    if (buf != NULL) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

static int parse_ms(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || *s == '\0' || *end != '\0' || !(v > 0) || v > 1e9) return -1;
    *out = v;
    return 0;
}

/* The engines' KV pool options: checked as integers here, passed through
 * verbatim (the engine checks how they combine). */
static const struct {
    const char *name;
    int lo;
} k_pool_opts[] = {
    {"--kv-max", 1}, {"--kv-max-mib", 1}, {"--kv-init", 1},
    {"--kv-step", 1}, {"--kv-hold-ms", 0}, {"--kv-resident", 1},
};
#define N_POOL_OPTS (sizeof(k_pool_opts) / sizeof(k_pool_opts[0]))

/* The index of option a in k_pool_opts, or -1. */
static int pool_opt_index(const char *a)
{
    for (size_t i = 0; i < N_POOL_OPTS; i++) {
        if (strcmp(a, k_pool_opts[i].name) == 0) return (int)i;
    }
    return -1;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = NULL, *key_file = NULL;
    const char *tmpl_file = NULL, *port_file = NULL, *engine_path = NULL;
    /* Engine options the server does not use itself: checked here so that a
     * bad value fails `strata serve` at once (not every engine start), then
     * passed through verbatim. NULL: not given, the engine's default. */
    const char *kv_type = NULL, *cache_mib = NULL, *min_tokens = NULL, *batch = NULL;
    int unused;
    const char *pool_vals[N_POOL_OPTS] = {0};
    const char *draft_max = NULL, *draft_min = NULL, *draft_p_min = NULL, *draft_model = NULL;
    const char *draft_gate = NULL;
    bool draft_ngram = false;
    int replicas = 1, slots = 4, ctx = 0, port = 8080, max_queue = 64, threads = 0;
    int route_load_only = 0, route_balance = POOL_ROUTE_BALANCE;
    bool reasoning_off = false;
    const char *allowed_origins = "*";
    /* --alias / --served-model-name: the names requests may give (the first
     * is the one reported); none: the file's name without .gguf */
    enum { MAX_NAMES = 16 };
    const char *names[MAX_NAMES];
    size_t n_names = 0;
    int drain_ms = 10000, ping_timeout = 10000, max_body = 8 << 20;
    int wedge_floor = POOL_WEDGE_FLOOR_MS;
    double wedge_per_token = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes one value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            serve_usage(stdout);
            return 0;
        }
        if (strcmp(a, "--draft-ngram") == 0) { /* the one flag without a value */
            draft_ngram = true;
            i--;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "strata serve: %s needs a value (or is unknown)\n\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) model_path = v;
        else if (strcmp(a, "--replicas") == 0) bad = parse_int(v, 1, POOL_MAX_REPLICAS, &replicas);
        else if (strcmp(a, "--slots") == 0) bad = parse_int(v, 1, 1024, &slots);
        else if (strcmp(a, "--ctx") == 0) bad = parse_int(v, 1, INT_MAX, &ctx);
        else if (strcmp(a, "--host") == 0) host = v;
        else if (strcmp(a, "--port") == 0) bad = parse_int(v, 0, 65535, &port);
        else if (strcmp(a, "--api-key") == 0) api_key = v;
        else if (strcmp(a, "--api-key-file") == 0) key_file = v;
        else if (strcmp(a, "--max-queue") == 0) bad = parse_int(v, 0, 1 << 20, &max_queue);
        else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) bad = parse_int(v, 1, 4096, &threads);
        else if (strcmp(a, "--chat-template-file") == 0) tmpl_file = v;
        else if (strcmp(a, "--allowed-origins") == 0) allowed_origins = v;
        else if (strcmp(a, "--alias") == 0 || strcmp(a, "-a") == 0 || strcmp(a, "--served-model-name") == 0) {
            if (n_names == MAX_NAMES || v[0] == '\0') {
                fprintf(stderr, "strata serve: %s: at most %d names, none empty\n", a, MAX_NAMES);
                return 2;
            }
            names[n_names++] = v;
        }
        else if (strcmp(a, "--max-body-bytes") == 0) bad = parse_int(v, 1, INT_MAX, &max_body);
        else if (strcmp(a, "--drain-timeout") == 0) bad = parse_int(v, 0, INT_MAX, &drain_ms);
        else if (strcmp(a, "--port-file") == 0) port_file = v;
        else if (strcmp(a, "--engine") == 0) engine_path = v;
        else if (strcmp(a, "--kv-type") == 0) {
            uint32_t t;
            strata_err kerr;
            bad = kv_type_parse(v, &t, &kerr);
            if (bad != 0) {
                fprintf(stderr, "strata serve: --kv-type: %s\n", kerr.msg);
                return 2;
            }
            kv_type = v;
        }
        else if (strcmp(a, "--prefix-cache-mib") == 0) {
            bad = parse_int(v, 0, 1 << 30, &unused);
            cache_mib = v;
        } else if (strcmp(a, "--prefix-min-tokens") == 0) {
            bad = parse_int(v, 0, 1 << 30, &unused);
            min_tokens = v;
        } else if (strcmp(a, "--batch") == 0) {
            bad = parse_int(v, 1, 1 << 20, &unused);
            batch = v;
        } else if (strcmp(a, "--draft-model") == 0) {
            bad = access(v, R_OK) != 0;
            draft_model = v;
        } else if (strcmp(a, "--draft-max") == 0) {
            bad = parse_int(v, 1, 16, &unused);
            draft_max = v;
        } else if (strcmp(a, "--draft-min") == 0) {
            bad = parse_int(v, 1, 16, &unused);
            draft_min = v;
        } else if (strcmp(a, "--draft-gate") == 0) {
            bad = strcmp(v, "on") != 0 && strcmp(v, "off") != 0;
            draft_gate = v;
        } else if (strcmp(a, "--draft-p-min") == 0) {
            char *end;
            errno = 0;
            double p = strtod(v, &end);
            bad = errno != 0 || *v == '\0' || *end != '\0' || !(p >= 0.0) || p > 1.0;
            draft_p_min = v;
        } else if (pool_opt_index(a) >= 0) {
            int k = pool_opt_index(a);
            bad = parse_int(v, k_pool_opts[k].lo, INT_MAX, &unused);
            pool_vals[k] = v;
        }
        else if (strcmp(a, "--ping-timeout") == 0) bad = parse_int(v, 1, INT_MAX, &ping_timeout);
        else if (strcmp(a, "--wedge-floor-ms") == 0) bad = parse_int(v, 0, INT_MAX, &wedge_floor);
        else if (strcmp(a, "--wedge-per-token-ms") == 0) bad = parse_ms(v, &wedge_per_token);
        else if (strcmp(a, "--route") == 0) {
            bad = strcmp(v, "prefix") != 0 && strcmp(v, "load") != 0;
            route_load_only = strcmp(v, "load") == 0;
        }
        else if (strcmp(a, "--route-balance") == 0) bad = parse_int(v, 0, 1 << 20, &route_balance);
        else if (strcmp(a, "--reasoning-format") == 0) {
            bad = strcmp(v, "auto") != 0 && strcmp(v, "deepseek") != 0 && strcmp(v, "none") != 0;
            reasoning_off = strcmp(v, "none") == 0;
        }
        else {
            fprintf(stderr, "strata serve: unknown option %s\n\n", a);
            serve_usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "strata serve: bad value for %s: %s\n", a, v);
            return 2;
        }
    }
    if (model_path == NULL) {
        fprintf(stderr, "strata serve: -m MODEL is required\n\n");
        serve_usage(stderr);
        return 2;
    }
    if (draft_ngram && draft_model != NULL) {
        fprintf(stderr, "strata serve: --draft-ngram and --draft-model are two draft sources: "
                        "give one\n");
        return 2;
    }
    char *key_buf = NULL;
    if (key_file != NULL) {
        key_buf = read_text_file(key_file, NULL);
        if (key_buf == NULL) {
            fprintf(stderr, "strata serve: cannot read %s\n", key_file);
            return 1;
        }
        key_buf[strcspn(key_buf, "\r\n")] = '\0';
        api_key = key_buf;
    }
    if (api_key != NULL && api_key[0] == '\0') {
        fprintf(stderr, "strata serve: the API key is empty\n");
        free(key_buf);
        return 2;
    }
    if (threads == 0) {
        threads = cli_default_threads() / replicas;
        if (threads < 1) threads = 1;
    }

    /* The model's metadata: vocab and chat template (no weights). */
    strata_err err;
    gguf *g = NULL;
    vocab *voc = NULL;
    chat_template_src src = {0};
    char *tmpl = NULL;
    int status = 1;
    pool *p = NULL;
    server *s = NULL;
    if (gguf_open(&g, model_path, &err) != 0 || vocab_load(&voc, g, &err) != 0) {
        fprintf(stderr, "strata serve: %s\n", err.msg);
        goto out;
    }
    int rc = chat_template_from_gguf(g, NULL, &src, &err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) {
        fprintf(stderr, "strata serve: %s\n", err.msg);
        goto out;
    }
    if (tmpl_file != NULL) {
        tmpl = read_text_file(tmpl_file, NULL);
        if (tmpl == NULL) {
            fprintf(stderr, "strata serve: cannot read %s\n", tmpl_file);
            goto out;
        }
    } else if (rc == 0) {
        tmpl = strdup(src.tmpl);
    } else {
        LOG_INFO("the model has no chat template; chat uses ChatML");
    }
    gguf_close(g);
    g = NULL;
    {
        /* what the server makes of the template's replies (README "Tool calls", "Reasoning") */
        static const char *const split_names[] = {
            [REASONING_NONE] = "none", [REASONING_THINK] = "<think> blocks",
            [REASONING_HARMONY] = "harmony channels", [REASONING_RECIPIENTS] = ">>> recipients",
            [REASONING_THINK_BRACKET] = "[THINK] blocks"};
        const char *family = NULL;
        tool_format tf = tool_format_detect(tmpl, &family);
        reasoning_format rf = reasoning_detect(tmpl);
        LOG_INFO("chat template: tool calls in the %s syntax%s; replies split: %s", family,
                 tf == TOOL_FORMAT_UNSUPPORTED ? " (not implemented: requests with tools are refused)" : "",
                 split_names[rf]);
    }

    /* The engines: this same binary (`strata engine`) unless --engine. */
    char self[PATH_MAX];
    ssize_t n_self = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n_self <= 0) {
        fprintf(stderr, "strata serve: cannot find this executable\n");
        goto out;
    }
    self[n_self] = '\0';
    char s_slots[16], s_ctx[16], s_threads[16];
    snprintf(s_slots, sizeof(s_slots), "%d", slots);
    snprintf(s_ctx, sizeof(s_ctx), "%d", ctx);
    snprintf(s_threads, sizeof(s_threads), "%d", threads);
    const char *args[48]; /* 7 fixed + 2 per optional pass-through option + NULL */
    int na = 0;
    args[na++] = "engine";
    args[na++] = "-m";
    args[na++] = model_path;
    args[na++] = "--slots";
    args[na++] = s_slots;
    args[na++] = "-t";
    args[na++] = s_threads;
    if (ctx > 0) {
        args[na++] = "--ctx";
        args[na++] = s_ctx;
    }
    if (kv_type != NULL) {
        args[na++] = "--kv-type";
        args[na++] = kv_type;
    }
    if (cache_mib != NULL) {
        args[na++] = "--prefix-cache-mib";
        args[na++] = cache_mib;
    }
    if (min_tokens != NULL) {
        args[na++] = "--prefix-min-tokens";
        args[na++] = min_tokens;
    }
    if (batch != NULL) {
        args[na++] = "--batch";
        args[na++] = batch;
    }
    for (size_t k = 0; k < N_POOL_OPTS; k++) {
        if (pool_vals[k] == NULL) continue;
        args[na++] = k_pool_opts[k].name;
        args[na++] = pool_vals[k];
    }
    if (draft_ngram) args[na++] = "--draft-ngram";
    const char *const draft_opts[5][2] = {{"--draft-max", draft_max}, {"--draft-min", draft_min},
                                          {"--draft-p-min", draft_p_min},
                                          {"--draft-model", draft_model},
                                          {"--draft-gate", draft_gate}};
    for (int k = 0; k < 5; k++) {
        if (draft_opts[k][1] == NULL) continue;
        args[na++] = draft_opts[k][0];
        args[na++] = draft_opts[k][1];
    }
    args[na] = NULL;

    /* Block the stop signals before any thread exists, so that every thread
     * inherits the mask and only sigwait below sees them. */
    sigset_t stop_sigs;
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGTERM);
    sigaddset(&stop_sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    pool_config pc = {.engine_path = engine_path ? engine_path : self, .engine_args = args,
                      .n_replicas = replicas, .n_slots = slots, .max_queue = max_queue,
                      .ping_timeout_ms = ping_timeout,
                      .wedge_floor_ms = wedge_floor > 0 ? wedge_floor : -1,
                      .wedge_per_token_ms = wedge_per_token,
                      .route_load_only = route_load_only,
                      .route_balance = route_balance == 0 ? -1 : route_balance};
    if (pool_start(&p, &pc, &err) != 0) {
        fprintf(stderr, "strata serve: %s\n", err.msg);
        goto out;
    }
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;
    char model_name[256];
    snprintf(model_name, sizeof(model_name), "%s", base);
    size_t nl = strlen(model_name);
    if (nl > 5 && strcmp(model_name + nl - 5, ".gguf") == 0) model_name[nl - 5] = '\0';
    server_config sc = {.host = host, .port = port, .api_key = api_key,
                        .max_body_bytes = (size_t)max_body,
                        .model_name = n_names > 0 ? names[0] : model_name,
                        .model_aliases = n_names > 1 ? names + 1 : NULL,
                        .n_model_aliases = n_names > 1 ? n_names - 1 : 0, .voc = voc,
                        .chat_template = tmpl, .bos = src.bos, .eos = src.eos,
                        .reasoning_off = reasoning_off, .allowed_origins = allowed_origins};
    if (server_start(&s, &sc, p, &err) != 0) {
        fprintf(stderr, "strata serve: %s\n", err.msg);
        goto out;
    }
    LOG_INFO("strata serve: %s on http://%s:%d (%d replicas x %d slots)", sc.model_name, host,
             server_port(s), replicas, slots);
    if (port_file != NULL) {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
        FILE *f = fopen(tmp, "we");
        if (f != NULL) {
            fprintf(f, "%d\n", server_port(s));
            fclose(f);
            rename(tmp, port_file);
        }
    }
    int sig = 0;
    while (sigwait(&stop_sigs, &sig) != 0) {
    }
    LOG_INFO("strata serve: signal %d: draining (up to %d ms)", sig, drain_ms);
    server_quiesce(s);
    int64_t deadline = strata_clock_ns() + (int64_t)drain_ms * 1000000;
    while (server_active(s) > 0 && strata_clock_ns() < deadline) usleep(20 * 1000);
    if (server_active(s) > 0) LOG_WARN("strata serve: %d requests still open; ending them", server_active(s));
    pool_stop(p, 5000);
    p = NULL;
    server_stop(s);
    s = NULL;
    LOG_INFO("strata serve: stopped");
    status = 0;
out:
    if (p != NULL) pool_stop(p, 1000);
    server_stop(s);
    if (g != NULL) gguf_close(g);
    vocab_free(voc);
    chat_template_src_free(&src);
    free(tmpl);
    free(key_buf);
    return status;
}
