/* `strata engine -m MODEL [--slots K] [--ctx N] [-t THREADS] [--batch B]
 * [--kv-max N | --kv-max-mib M] [--kv-init N] [--kv-step N] [--kv-hold-ms MS]
 * [--kv-resident N] [--prefix-cache-mib M] [--prefix-min-tokens T]
 * [--draft-ngram | --draft-model FILE] [--draft-max N] [--draft-min N]
 * [--draft-p-min P] [--draft-gate on|off]`:
 * the engine process. It speaks the engine protocol (src/engine/
 * protocol.h) on stdin and stdout and logs on stderr; `strata serve` starts
 * it, and a person can drive it by hand:
 *
 *   echo '{"op":"gen","id":1,"tokens":[1,403,407,261,378],"max_tokens":8}' |
 *       strata engine -m model.gguf
 *
 * This file only parses options and loads the model; the loop is
 * engine_serve (src/engine/engine_loop.h). */
#include "cli.h"

#include "base/err.h"
#include "base/log.h"
#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "model/kv_cache.h"
#include "model/model.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void engine_usage(FILE *f)
{
    fprintf(f,
            "usage: strata engine -m MODEL [--slots K] [--ctx N] [-t THREADS] [--batch B]\n"
            "                     [--kv-max N | --kv-max-mib M] [--kv-init N] [--kv-step N]\n"
            "                     [--kv-hold-ms MS] [--kv-resident N]\n"
            "                     [--prefix-cache-mib M] [--prefix-min-tokens T]\n"
            "                     [--draft-ngram | --draft-model FILE] [--draft-max N]\n"
            "                     [--draft-min N] [--draft-p-min P] [--draft-gate on|off]\n\n"
            "Serves the engine protocol (newline-delimited JSON) on stdin/stdout; logs go to\n"
            "stderr (STRATA_LOG=debug for one line per request).\n\n"
            "  -m, --model PATH    the GGUF model\n"
            "  --slots K           sequences generated at once (default %d); more wait in a queue\n"
            "  --ctx N             tokens per request, prompt + generated (default %d, or the\n"
            "                      model's training context if smaller)\n"
            "  --kv-max N          positions of the KV pool that all slots share (default:\n"
            "                      K x N, but at most %d MiB unless one context needs more).\n"
            "                      When it is full new requests wait and the youngest running\n"
            "                      one is preempted (it resumes later, same output); a\n"
            "                      request that cannot fit even alone gets an error\n"
            "  --kv-max-mib M      the same in MiB of KV blocks\n"
            "  --kv-step N         the pool is elastic: memory is committed as blocks are\n"
            "                      written and given back in steps of N positions\n"
            "                      (default %d) once a step has been free for\n"
            "  --kv-hold-ms MS     milliseconds (default %d; 0: at once)\n"
            "  --kv-init N         positions kept committed whatever (default: one step)\n"
            "  --kv-resident N     instead: a pool of N positions allocated at start and never\n"
            "                      shrunk (for a machine that runs only this engine)\n"
            "  -t, --threads N     threads of the forward pass (default: the CPUs)\n"
            "  --kv-type T         KV cache rows: f16 (default) or q8_0 (about half the\n"
            "                      memory; needs a head size that is a multiple of 32)\n"
            "  --batch B           token budget of one step: all decoding sequences plus\n"
            "                      prompt chunks (default %d)\n"
            "  --prefix-cache-mib M  the prefix cache's budget: MiB of KV blocks that may stay\n"
            "                      cached after their requests end (default: the whole pool;\n"
            "                      0 turns the prefix cache off). Prompts that start alike\n"
            "                      share their cached blocks and compute only the rest\n"
            "  --prefix-min-tokens T  the fewest prompt tokens worth taking from the cache\n"
            "                      (default: one block, 32)\n"
            "  --draft-ngram       speculative decoding with n-gram (prompt lookup) drafts: a\n"
            "                      recent suffix seen earlier in the sequence proposes what\n"
            "                      followed it; drafts are verified in the step's batch and\n"
            "                      the output does not change (greedy or seeded)\n"
            "  --draft-model FILE  speculative decoding with a draft model: a smaller GGUF\n"
            "                      with the same vocabulary, run greedily by this engine\n"
            "                      (same threads, a KV cache of its own) to propose tokens\n"
            "                      that the model verifies as above\n"
            "  --draft-max N       drafted tokens per sequence and step at most (default 4)\n"
            "  --draft-min N       fewer proposed tokens are not drafted (default 1)\n"
            "  --draft-p-min P     a drafted token's least draft probability: the share of\n"
            "                      the suffix's earlier occurrences it followed (n-gram), or\n"
            "                      the draft model's softmax probability (default 0.5)\n"
            "  --draft-gate on|off the cost gate (default on): the engine times its steps and\n"
            "                      the draft's, and a sequence drafts only as many tokens as\n"
            "                      its acceptance makes worth their cost (none where a step\n"
            "                      is bound by arithmetic and drafts are often rejected);\n"
            "                      off: every step drafts what the source proposes\n\n"
            "STRATA_TEST_HANG_AT_STEP=N (tests only) makes the scheduler hang for good at\n"
            "the start of step N while pings are still answered (src/engine/protocol.h).\n",
            ENGINE_DEFAULT_SLOTS, ENGINE_DEFAULT_CTX, ENGINE_DEFAULT_KV_MIB, ENGINE_DEFAULT_KV_STEP,
            ENGINE_DEFAULT_KV_HOLD_MS, ENGINE_DEFAULT_BATCH);
}

static int parse_int(const char *opt, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi) {
        fprintf(stderr, "strata engine: %s wants an integer from %lld to %lld, not '%s'\n", opt,
                lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_engine(int argc, char **argv)
{
    const char *path = NULL;
    long long slots = ENGINE_DEFAULT_SLOTS, n_ctx = 0, threads = cli_default_threads();
    long long batch = ENGINE_DEFAULT_BATCH;
    uint32_t kv_type = 0; /* F16 */
    long long cache_mib = -1, min_tokens = 0; /* -1: the whole pool */
    long long kv_max = 0, kv_max_mib = 0;     /* 0: the default pool */
    long long kv_init = 0, kv_step = 0, kv_hold = -1, kv_resident = 0; /* defaults */
    bool draft_ngram = false;
    const char *draft_path = NULL;
    long long draft_max = 0, draft_min = 0; /* 0: the engine's defaults */
    double draft_p_min = 0.0;
    bool p_min_set = false;
    bool draft_gate = true;
    for (int i = 1; i < argc; i += 2) { /* option, value */
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(a, "--draft-ngram") == 0) { /* the one flag without a value */
            draft_ngram = true;
            i--;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            engine_usage(stdout);
            return 0;
        } else if (v == NULL) {
            fprintf(stderr, "strata engine: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            path = v;
        } else if (strcmp(a, "--slots") == 0) {
            rc = parse_int(a, v, 1, 4096, &slots);
        } else if (strcmp(a, "--ctx") == 0) {
            rc = parse_int(a, v, 1, 1 << 24, &n_ctx);
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            rc = parse_int(a, v, 1, 512, &threads);
        } else if (strcmp(a, "--kv-type") == 0) {
            strata_err kerr;
            rc = kv_type_parse(v, &kv_type, &kerr);
            if (rc != 0) fprintf(stderr, "strata engine: --kv-type: %s\n", kerr.msg);
        } else if (strcmp(a, "--kv-max") == 0) {
            rc = parse_int(a, v, 1, (1LL << 31) - 4096, &kv_max);
        } else if (strcmp(a, "--kv-max-mib") == 0) {
            rc = parse_int(a, v, 1, 1LL << 26, &kv_max_mib);
        } else if (strcmp(a, "--kv-init") == 0) {
            rc = parse_int(a, v, 1, (1LL << 31) - 4096, &kv_init);
        } else if (strcmp(a, "--kv-step") == 0) {
            rc = parse_int(a, v, 1, (1LL << 31) - 4096, &kv_step);
        } else if (strcmp(a, "--kv-hold-ms") == 0) {
            rc = parse_int(a, v, 0, 1LL << 40, &kv_hold);
        } else if (strcmp(a, "--kv-resident") == 0) {
            rc = parse_int(a, v, 1, (1LL << 31) - 4096, &kv_resident);
        } else if (strcmp(a, "--batch") == 0) {
            rc = parse_int(a, v, 1, 1 << 20, &batch);
        } else if (strcmp(a, "--prefix-cache-mib") == 0) {
            rc = parse_int(a, v, 0, 1LL << 30, &cache_mib);
        } else if (strcmp(a, "--prefix-min-tokens") == 0) {
            rc = parse_int(a, v, 0, 1 << 30, &min_tokens);
        } else if (strcmp(a, "--draft-model") == 0) {
            draft_path = v;
        } else if (strcmp(a, "--draft-max") == 0) {
            rc = parse_int(a, v, 1, 16, &draft_max);
        } else if (strcmp(a, "--draft-min") == 0) {
            rc = parse_int(a, v, 1, 16, &draft_min);
        } else if (strcmp(a, "--draft-gate") == 0) {
            draft_gate = strcmp(v, "on") == 0;
            if (!draft_gate && strcmp(v, "off") != 0) {
                fprintf(stderr, "strata engine: --draft-gate wants on or off, not '%s'\n", v);
                rc = -1;
            }
        } else if (strcmp(a, "--draft-p-min") == 0) {
            char *end;
            errno = 0;
            draft_p_min = strtod(v, &end);
            p_min_set = true;
            if (*v == '\0' || *end != '\0' || errno != 0 || !(draft_p_min >= 0.0) ||
                draft_p_min > 1.0) {
                fprintf(stderr, "strata engine: --draft-p-min wants a number in [0, 1], not '%s'\n",
                        v);
                rc = -1;
            }
        } else {
            fprintf(stderr, "strata engine: unknown option '%s'\n", a);
            engine_usage(stderr);
            return 2;
        }
        if (rc != 0) return 2;
    }
    if (path == NULL) {
        engine_usage(stderr);
        return 2;
    }
    if (draft_ngram && draft_path != NULL) {
        fprintf(stderr, "strata engine: --draft-ngram and --draft-model are two draft sources: "
                        "give one\n");
        return 2;
    }
    if (kv_max > 0 && kv_max_mib > 0) {
        fprintf(stderr, "strata engine: --kv-max and --kv-max-mib both size the pool: give one\n");
        return 2;
    }
    if (kv_resident > 0 && (kv_max > 0 || kv_max_mib > 0 || kv_init > 0 || kv_step > 0 ||
                            kv_hold >= 0)) {
        fprintf(stderr, "strata engine: --kv-resident sizes a pool that never shrinks; it "
                        "takes no --kv-max, --kv-max-mib, --kv-init, --kv-step or --kv-hold-ms\n");
        return 2;
    }
    /* The fault-injection hook of protocol.h, for tests of the server's
     * watchdog; a bad value is refused rather than ignored. */
    long long hang_at = 0;
    const char *hang = getenv("STRATA_TEST_HANG_AT_STEP");
    if (hang != NULL && hang[0] != '\0') {
        if (parse_int("STRATA_TEST_HANG_AT_STEP", hang, 1, INT64_MAX, &hang_at) != 0) return 2;
        LOG_WARN("engine: STRATA_TEST_HANG_AT_STEP=%lld: the scheduler will hang at that step "
                 "(a test hook)", hang_at);
    }
    /* A server that goes away must not kill us mid-write: the write fails
     * with EPIPE instead and the loop ends. */
    signal(SIGPIPE, SIG_IGN);

    strata_err err;
    model *m = NULL, *dm = NULL;
    engine *e = NULL;
    int rc = model_open(&m, path, &err);
    if (rc == 0 && draft_path != NULL) {
        rc = model_open(&dm, draft_path, &err);
        if (rc != 0) {
            strata_err e2 = err;
            strata_err_set(&err, rc, "--draft-model %s: %s", draft_path, e2.msg);
        }
    }
    if (rc == 0) {
        engine_params p = {.n_slots = (int)slots, .n_ctx = n_ctx, .n_batch = batch,
                           .n_threads = (int)threads, .kv_type = kv_type, .hang_at_step = hang_at,
                           .no_prefix_cache = cache_mib == 0,
                           .prefix_cache_bytes = cache_mib > 0 ? (int64_t)cache_mib << 20 : 0,
                           .prefix_min_tokens = min_tokens, .kv_max_tokens = kv_max,
                           .kv_max_bytes = (int64_t)kv_max_mib << 20,
                           .kv_resident_tokens = kv_resident, .kv_init_tokens = kv_init,
                           .kv_step_tokens = kv_step, .kv_hold_ms = kv_hold,
                           .draft_ngram = draft_ngram, .draft_model = dm,
                           .draft_max = (int)draft_max,
                           .draft_min = (int)draft_min,
                           .draft_gate = draft_gate,
                           /* 0 asks for no threshold: the engine's "none" is < 0 */
                           .draft_p_min = draft_p_min == 0.0 && p_min_set
                                              ? -1.0f : (float)draft_p_min};
        rc = engine_init(&e, m, &p, &err);
    }
    if (rc == 0) {
        proto_msg ready;
        engine_ready(e, &ready);
        LOG_INFO("engine: %s (%s, %" PRId64 " layers, vocab %" PRId64 "): %lld slots of %" PRId64
                 " tokens, batch %" PRId64 ", %lld threads, KV pool %" PRId64
                 " tokens shared by the slots (%.1f MiB), prefix cache %s (%.1f MiB)",
                 path, ready.u.ready.arch, ready.u.ready.n_layer, ready.u.ready.n_vocab, slots,
                 ready.u.ready.n_ctx, ready.u.ready.n_batch, threads,
                 ready.u.ready.kv_n_blocks * ready.u.ready.kv_block_tokens,
                 (double)ready.u.ready.kv_bytes / (1024.0 * 1024.0),
                 ready.u.ready.kv_prefix_cache ? "on" : "off",
                 (double)ready.u.ready.kv_cache_bytes / (1024.0 * 1024.0));
        if (ready.u.ready.draft_source != NULL) {
            LOG_INFO("engine: speculative decoding: %s drafts, %" PRId64 " to %" PRId64
                     " tokens per step, draft p-min %.2f, cost gate %s",
                     ready.u.ready.draft_source, ready.u.ready.draft_min, ready.u.ready.draft_max,
                     ready.u.ready.draft_p_min, draft_gate ? "on" : "off");
        }
        if (dm != NULL) {
            LOG_INFO("engine: draft model %s (%s, %" PRId64 " layers, %" PRId64 " wide)",
                     draft_path, dm->hp.arch_name ? dm->hp.arch_name : "?", dm->hp.n_layer,
                     dm->hp.n_embd);
        }
        const proto_ready *rr = &ready.u.ready;
        if (rr->kv_resident) {
            LOG_INFO("engine: KV pool resident: %" PRId64 " positions, all allocated now",
                     rr->kv_max_tokens);
        } else {
            LOG_INFO("engine: KV pool elastic: at most %" PRId64 " positions (%.1f MiB), %" PRId64
                     " kept, steps of %" PRId64 " given back after %" PRId64 " ms free",
                     rr->kv_max_tokens, (double)rr->kv_bytes / (1024.0 * 1024.0),
                     rr->kv_init_tokens, rr->kv_step_tokens, rr->kv_hold_ms);
        }
        rc = engine_serve(e, STDIN_FILENO, STDOUT_FILENO, 0, &err);
    }
    if (rc != 0) fprintf(stderr, "strata engine: %s\n", err.msg);
    else LOG_INFO("engine: shut down");
    engine_free(e);
    model_close(dm);
    model_close(m);
    return rc == 0 ? 0 : 1;
}
