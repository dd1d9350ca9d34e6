/* `strata run -m MODEL [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P]
 * [--min-p P] [--seed S] [-t THREADS] [--ctx N] [--chat]`: generate text in
 * the terminal.
 *
 * stdout gets the generated text as it is produced and nothing else (no
 * prompt echo, no added newline), so it can be piped and compared; the
 * statistics go to stderr. Without -p the prompt is empty: just BOS where
 * the model adds one. With --chat, lines read from stdin are user turns of
 * a conversation rendered with the model's chat template (ChatML when the
 * model has none), and each answer is printed followed by a newline; the KV
 * cache keeps the conversation, so each turn evaluates only its new tokens. */
#include "cli.h"

#include "base/clock.h"
#include "base/err.h"
#include "model/forward.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The template for models that carry none (what llama-server falls back to). */
static const char k_chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: strata run -m MODEL [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "                  [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS]\n"
            "                  [--ctx N] [--kv-type T] [-ctk T] [-ctv T] [--chat]\n\n"
            "  -p, --prompt TEXT   the prompt (default: empty, just BOS where the model adds it)\n"
            "  -n N                tokens to generate at most (default 256; -1: until the end\n"
            "                      of generation or a full context)\n"
            "  --temp T            temperature (default 0.8; 0 is greedy)\n"
            "  --top-k K           default 40 (0: off)\n"
            "  --top-p P           default 0.95 (1: off)\n"
            "  --min-p P           default 0.05 (0: off)\n"
            "  --repeat-penalty R  default 1 (off), over the last 64 tokens\n"
            "  --seed S            seed of the draws (default: random, printed to stderr)\n"
            "  -t, --threads N     threads (default: the CPUs)\n"
            "  --ctx N             context size (default: 4096, or the model's if smaller)\n"
            "  --kv-type T         KV cache rows, keys and values: f16 (default) or q8_0\n"
            "  -ctk T, -ctv T      the key / value row type alone\n"
            "  --chat              chat on stdin/stdout with the model's chat template\n");
}

typedef struct runner {
    model *m;
    model_ctx *ctx;
    vocab *voc;
    sampler *smp;
    float *logits;
    int64_t n_ctx;
    int32_t *hist; /* tokens in the cache, in order */
    int64_t n_hist;
    /* statistics of the last generate() */
    int64_t n_prompt, n_gen;
    double prompt_ms, gen_ms;
} runner;

/* Brings the cache to hold prompt[0..n): keeps the longest common prefix
 * with what is there, evaluates the rest as one batch, and leaves the last
 * position's logits in r->logits. */
static int eval_prompt(runner *r, const int32_t *prompt, int64_t n, strata_err *err)
{
    if (n <= 0) return strata_err_set(err, STRATA_EINVAL, "the prompt has no tokens");
    if (n > r->n_ctx) {
        return strata_err_set(err, STRATA_ERANGE,
                              "the prompt is %" PRId64 " tokens; the context holds %" PRId64, n,
                              r->n_ctx);
    }
    int64_t keep = 0;
    while (keep < r->n_hist && keep < n && r->hist[keep] == prompt[keep]) keep++;
    /* the penalties see the prompt's tokens too, as llama.cpp's command
     * line and server feed them to their samplers (the ones kept from the
     * last turn were seen then) */
    for (int64_t i = keep; i < n; i++) sampler_accept(r->smp, prompt[i]);
    if (keep == n && n > 0) keep--; /* re-evaluate the last token to get its logits */
    int64_t todo = n - keep;
    int32_t *seq = malloc((size_t)(todo > 0 ? todo : 1) * sizeof(int32_t));
    int32_t *pos = malloc((size_t)(todo > 0 ? todo : 1) * sizeof(int32_t));
    int8_t *want = calloc((size_t)(todo > 0 ? todo : 1), 1);
    if (seq == NULL || pos == NULL || want == NULL) {
        free(seq);
        free(pos);
        free(want);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    for (int64_t i = 0; i < todo; i++) {
        seq[i] = 0;
        pos[i] = (int32_t)(keep + i);
    }
    want[todo - 1] = 1;
    model_batch b = {.n_tokens = todo, .tokens = prompt + keep, .seq_ids = seq, .pos = pos,
                     .want_logits = want};
    double t0 = strata_clock_ms();
    int rc = todo > 0 ? model_forward(r->ctx, &b, r->logits, err) : 0;
    r->prompt_ms = strata_clock_ms() - t0;
    r->n_prompt = todo;
    free(seq);
    free(pos);
    free(want);
    if (rc != 0) return rc;
    memcpy(r->hist, prompt, (size_t)n * sizeof(int32_t));
    r->n_hist = n;
    return 0;
}

static void emit(FILE *out, FILE *copy, const char *text, size_t n)
{
    fwrite(text, 1, n, out);
    fflush(out);
    if (copy != NULL) fwrite(text, 1, n, copy);
}

/* Samples up to n_max tokens (< 0: until the end or a full context) after
 * the prompt in the cache, writing text to out as it comes (and to copy,
 * when not NULL). The stream has already seen the prompt's tokens, so
 * spacing rules apply as in the whole sequence. */
static int generate(runner *r, int64_t n_max, tok_stream *st, FILE *out, FILE *copy,
                    strata_err *err)
{
    double t0 = strata_clock_ms();
    r->n_gen = 0;
    int rc = 0;
    while (n_max < 0 || r->n_gen < n_max) {
        int32_t tok = sampler_sample(r->smp, r->logits);
        sampler_accept(r->smp, tok);
        if (vocab_is_eog(r->voc, tok)) break;
        r->n_gen++;
        const char *text;
        size_t n_text;
        rc = tok_stream_push(st, tok, &text, &n_text, err);
        if (rc != 0) break;
        if (n_text > 0) emit(out, copy, text, n_text);
        if (r->n_hist >= r->n_ctx) break; /* the context is full */
        int32_t seq = 0, pos = (int32_t)r->n_hist;
        model_batch b = {.n_tokens = 1, .tokens = &tok, .seq_ids = &seq, .pos = &pos};
        rc = model_forward(r->ctx, &b, r->logits, err);
        if (rc != 0) break;
        r->hist[r->n_hist++] = tok;
    }
    const char *text;
    size_t n_text, n_incomplete;
    if (rc == 0 && tok_stream_finish(st, &text, &n_text, &n_incomplete, err) == 0) {
        emit(out, copy, text, n_text - n_incomplete);
        if (n_incomplete > 0) emit(out, copy, "\xef\xbf\xbd", 3); /* U+FFFD for a cut character */
    }
    r->gen_ms = strata_clock_ms() - t0;
    return rc;
}

static void print_stats(const runner *r)
{
    fprintf(stderr, "\nprompt: %" PRId64 " tokens in %.1f ms (%.2f tok/s); generated: %" PRId64
            " tokens in %.1f ms (%.2f tok/s)\n", r->n_prompt, r->prompt_ms,
            r->prompt_ms > 0 ? (double)r->n_prompt * 1000.0 / r->prompt_ms : 0.0, r->n_gen,
            r->gen_ms, r->gen_ms > 0 ? (double)r->n_gen * 1000.0 / r->gen_ms : 0.0);
}

/* Pushes the prompt's tokens through a fresh stream without printing, so
 * the first generated token is detokenized as part of the whole text. */
static int stream_prime(tok_stream *st, const vocab *v, const int32_t *ids, size_t n,
                        strata_err *err)
{
    tok_stream_init(st, v, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE);
    for (size_t i = 0; i < n; i++) {
        const char *text;
        size_t n_text;
        int rc = tok_stream_push(st, ids[i], &text, &n_text, err);
        if (rc != 0) return rc;
    }
    return 0;
}

static int run_once(runner *r, const char *prompt, int64_t n_max, strata_err *err)
{
    int32_t *ids;
    size_t n_ids;
    int rc = tok_tokenize_alloc(r->voc, prompt, strlen(prompt), true, true, &ids, &n_ids, err);
    if (rc != 0) return rc;
    if (n_ids == 0) {
        free(ids);
        return strata_err_set(err, STRATA_EINVAL,
                              "the prompt is empty and the model adds no BOS: nothing to start "
                              "from (give -p)");
    }
    tok_stream st;
    rc = stream_prime(&st, r->voc, ids, n_ids, err);
    if (rc == 0) rc = eval_prompt(r, ids, (int64_t)n_ids, err);
    if (rc == 0) rc = generate(r, n_max, &st, stdout, NULL, err);
    tok_stream_free(&st);
    free(ids);
    if (rc == 0) print_stats(r);
    return rc;
}

static int run_chat(runner *r, int64_t n_max, strata_err *err)
{
    chat_template_src src = {0};
    int rc = chat_template_from_gguf(r->m->g, NULL, &src, err);
    const char *tmpl = src.tmpl;
    size_t tmpl_len = src.tmpl_len;
    if (rc == STRATA_ENOTFOUND) {
        fprintf(stderr, "strata run: the model has no chat template; using ChatML\n");
        tmpl = k_chatml;
        tmpl_len = sizeof(k_chatml) - 1;
        rc = 0;
    }
    if (rc != 0) return rc;
    json_t *messages = json_array();
    char *line = NULL;
    size_t line_cap = 0;
    bool tty = isatty(STDIN_FILENO);
    for (;;) {
        if (tty) fputs("> ", stderr);
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "user", "content", line));
        chat_template_opts o = {.add_generation_prompt = true, .bos_token = src.bos,
                                .eos_token = src.eos};
        char *prompt;
        size_t prompt_len;
        rc = chat_template_render(tmpl, tmpl_len, messages, &o, &prompt, &prompt_len, err);
        if (rc != 0) break;
        /* The rendered prompt carries its own BOS when the template writes
         * one; add the vocab's only when the text does not start with it. */
        bool add_special = src.bos == NULL || src.bos[0] == '\0' ||
                           strncmp(prompt, src.bos, strlen(src.bos)) != 0;
        int32_t *ids;
        size_t n_ids;
        rc = tok_tokenize_alloc(r->voc, prompt, prompt_len, add_special, true, &ids, &n_ids, err);
        free(prompt);
        if (rc != 0) break;
        tok_stream st;
        rc = stream_prime(&st, r->voc, ids, n_ids, err);
        if (rc == 0) rc = eval_prompt(r, ids, (int64_t)n_ids, err);
        /* The answer is printed as it comes and captured too, to go back
         * into the conversation. */
        char *answer = NULL;
        size_t answer_len = 0;
        FILE *cap = rc == 0 ? open_memstream(&answer, &answer_len) : NULL;
        if (rc == 0 && cap == NULL) rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        if (rc == 0) {
            rc = generate(r, n_max, &st, stdout, cap, err);
            fclose(cap);
            fputc('\n', stdout);
            fflush(stdout);
            json_array_append_new(messages, json_pack("{s:s,s:s%}", "role", "assistant",
                                                      "content", answer, answer_len));
            if (tty) print_stats(r);
        }
        free(answer);
        tok_stream_free(&st);
        free(ids);
        if (rc != 0) break;
    }
    free(line);
    json_decref(messages);
    chat_template_src_free(&src);
    return rc;
}

static int parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi) {
        fprintf(stderr, "strata run: %s wants a number from %g to %g, not '%s'\n", opt, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

static uint64_t random_seed(void)
{
    uint64_t s = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL || fread(&s, sizeof(s), 1, f) != 1) s = (uint64_t)time(NULL) ^ (uint64_t)getpid();
    if (f != NULL) fclose(f);
    return s & 0xffffffffu; /* short enough to type back in */
}

int cmd_run(int argc, char **argv)
{
    const char *path = NULL, *prompt = "";
    double n_gen = 256, threads = cli_default_threads(), n_ctx = 0, seed = -1;
    bool chat = false;
    uint32_t k_type = 0, v_type = 0; /* F16 */
    int kv_opt;
    sample_params sp = sample_params_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0;
        int rc = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            run_usage(stdout);
            return 0;
        } else if (strcmp(a, "--chat") == 0) {
            chat = true;
            continue;
        } else if (v == NULL) {
            fprintf(stderr, "strata run: '%s' needs a value or is unknown\n", a);
            return 2;
        } else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) {
            path = v;
        } else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) {
            prompt = v;
        } else if (strcmp(a, "-n") == 0) {
            rc = parse_num(a, v, -1, 1e9, &n_gen);
        } else if (strcmp(a, "--temp") == 0) {
            rc = parse_num(a, v, 0, 100, &x);
            sp.temperature = (float)x;
        } else if (strcmp(a, "--top-k") == 0) {
            rc = parse_num(a, v, 0, 1e9, &x);
            sp.top_k = (int32_t)x;
        } else if (strcmp(a, "--top-p") == 0) {
            rc = parse_num(a, v, 0, 1, &x);
            sp.top_p = (float)x;
        } else if (strcmp(a, "--min-p") == 0) {
            rc = parse_num(a, v, 0, 1, &x);
            sp.min_p = (float)x;
        } else if (strcmp(a, "--repeat-penalty") == 0) {
            rc = parse_num(a, v, 0, 10, &x);
            sp.repeat_penalty = (float)x;
        } else if (strcmp(a, "--seed") == 0) {
            rc = parse_num(a, v, 0, 18446744073709549568.0, &seed);
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) {
            rc = parse_num(a, v, 1, 512, &threads);
        } else if (strcmp(a, "--ctx") == 0) {
            rc = parse_num(a, v, 1, 1 << 24, &n_ctx);
        } else if ((kv_opt = cli_kv_type_option("run", a, v, &k_type, &v_type)) != 0) {
            /* --kv-type, -ctk, -ctv: stored, or refused with a message */
            if (kv_opt < 0) return 2;
        } else {
            fprintf(stderr, "strata run: unknown option '%s'\n", a);
            run_usage(stderr);
            return 2;
        }
        if (rc != 0) return 2;
        i++;
    }
    if (path == NULL) {
        run_usage(stderr);
        return 2;
    }
    sp.seed = seed >= 0 ? (uint64_t)seed : random_seed();

    strata_err err;
    runner r = {0};
    int rc = model_open(&r.m, path, &err);
    if (rc == 0) rc = vocab_load(&r.voc, r.m->g, &err);
    if (rc == 0 && vocab_n_tokens(r.voc) > r.m->hp.n_vocab) {
        rc = strata_err_set(&err, STRATA_EFORMAT, "the tokenizer has %d tokens but the model "
                            "only %" PRId64 " rows of logits", vocab_n_tokens(r.voc),
                            r.m->hp.n_vocab);
    }
    if (rc == 0) {
        r.n_ctx = n_ctx > 0 ? (int64_t)n_ctx : 4096;
        if (n_ctx <= 0 && r.m->hp.n_ctx_train > 0 && r.m->hp.n_ctx_train < r.n_ctx) {
            r.n_ctx = r.m->hp.n_ctx_train;
        }
        model_ctx_params cp = {.n_ctx = r.n_ctx, .n_seq_max = 1, .n_threads = (int)threads,
                               .k_type = k_type, .v_type = v_type};
        rc = model_ctx_init(&r.ctx, r.m, &cp, &err);
    }
    if (rc == 0) rc = kv_seq_add(model_ctx_kv(r.ctx), 0, &err);
    if (rc == 0) rc = sampler_new(&r.smp, &sp, (int32_t)r.m->hp.n_vocab, &err);
    if (rc == 0) {
        r.logits = malloc((size_t)r.m->hp.n_vocab * sizeof(float));
        r.hist = malloc((size_t)r.n_ctx * sizeof(int32_t));
        if (r.logits == NULL || r.hist == NULL) rc = strata_err_set(&err, STRATA_ENOMEM, "out of memory");
    }
    if (rc == 0) {
        if (sp.temperature > 0) fprintf(stderr, "strata run: seed %" PRIu64 "\n", sp.seed);
        rc = chat ? run_chat(&r, (int64_t)n_gen, &err) : run_once(&r, prompt, (int64_t)n_gen, &err);
    }
    if (rc != 0) fprintf(stderr, "strata run: %s\n", err.msg);
    free(r.logits);
    free(r.hist);
    sampler_free(r.smp);
    model_ctx_free(r.ctx);
    vocab_free(r.voc);
    model_close(r.m);
    return rc == 0 ? 0 : 1;
}
