/* Grammar mask cost per token on a real vocabulary.
 *
 *   bench_grammar VOCAB.gguf [N_TOKENS] [SEED]
 *
 * Walks a JSON grammar (tests/engine/json_gbnf.h) token by token, choosing
 * an allowed token at random each step as a sampler would, and times the
 * mask of every step on one thread: all steps (what decoding pays, with the
 * state's caches as they come), and the first-visit steps (no cached mask)
 * apart. Prints median and p99 in microseconds. */
#include "base/clock.h"
#include "base/rng.h"
#include "engine/engine_grammar.h"
#include "text/tokenizer.h"

#include "../tests/engine/json_gbnf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, size_t n)
{
    if (n == 0) return;
    qsort(t, n, sizeof(double), cmp_d);
    printf("%-28s n=%-6zu median %8.1f us   p99 %8.1f us   max %8.1f us\n", what, n, t[n / 2],
           t[(size_t)((double)n * 0.99)], t[n - 1]);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_grammar VOCAB.gguf [N_TOKENS] [SEED]\n");
        return 2;
    }
    int n_steps = argc > 2 ? atoi(argv[2]) : 2000;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 1;
    strata_err err;
    vocab *v = NULL;
    grammar_vocab *gv = NULL;
    grammar *g = NULL;
    if (vocab_open(&v, argv[1], &err) || engine_grammar_vocab(&gv, v, &err) ||
        grammar_parse(&g, json_gbnf, strlen(json_gbnf), &err)) {
        fprintf(stderr, "bench_grammar: %s\n", err.msg);
        return 1;
    }
    int32_t n = vocab_n_tokens(v);
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    size_t words = grammar_mask_words(gv);
    uint32_t *mask = malloc(words * sizeof(uint32_t));
    double *all = malloc((size_t)n_steps * sizeof(double));
    double *cold = malloc((size_t)n_steps * sizeof(double));
    size_t n_all = 0, n_cold = 0;
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    grammar_state *s = NULL;
    int64_t allowed_sum = 0;
    while ((int)n_all < n_steps) {
        if (s == NULL && grammar_state_new(&s, g, &err)) return 1;
        double t0 = now_us();
        int64_t count = grammar_state_mask(s, gv, mask);
        double dt = now_us() - t0;
        all[n_all++] = dt;
        /* a first visit is one whose mask took the trie walk: far slower
         * than a cache copy; told apart by a second call, which always hits */
        double t1 = now_us();
        grammar_state_mask(s, gv, mask);
        double hit = now_us() - t1;
        if (dt > 4 * hit + 5) cold[n_cold++] = dt;
        allowed_sum += count;
        if (count <= 0 || grammar_state_can_end(s)) { /* one object done: start another */
            grammar_state_free(s);
            s = NULL;
            continue;
        }
        int64_t k = (int64_t)(strata_rng_uniform(&rng) * (double)count);
        for (int32_t t = 0; t < n; t++) {
            if (((mask[t / 32] >> (t % 32)) & 1u) && k-- == 0) {
                size_t len = 0;
                tok_token_to_piece(v, t, false, buf, TOK_MAX_PIECE_BYTES, &len, &err);
                grammar_state_accept_bytes(s, (const uint8_t *)buf, len);
                break;
            }
        }
    }
    printf("vocab %s: %d tokens; JSON grammar; %d steps; mean allowed %.0f tokens\n", argv[1], n,
           n_steps, (double)allowed_sum / (double)n_steps);
    report("mask, every step", all, n_all);
    report("mask, first visits (walk)", cold, n_cold);
    grammar_state_free(s);
    free(all), free(cold), free(mask), free(buf);
    grammar_free(g);
    grammar_vocab_free(gv);
    vocab_free(v);
    return 0;
}
