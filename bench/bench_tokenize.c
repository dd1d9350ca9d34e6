/* bench_tokenize: tokenizer and detokenizer throughput on ~1 MB of English.
 *
 *   bench_tokenize [--text FILE] [--mb N] [--reps N] [VOCAB.gguf ...]
 *
 * The text is FILE, or N MB (default 1) generated deterministically from a
 * fixed list of common English words with capitals, punctuation, numbers
 * and paragraph breaks. Without vocab arguments it uses the reference
 * vocabs (llama-spm, gpt-2, deepseek-llm, falcon, qwen35, gemma-4,
 * bert-bge) found under
 * $STRATA_TEST_DATA/tokenizer or ../shared/data/tokenizer beside the
 * project. For each vocab it prints the median over --reps runs (default
 * 5) of tokenizing the whole text in one call (no BOS/EOS, special text not
 * parsed) and of detokenizing the ids. */
#include "base/clock.h"
#include "base/rng.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_words[] = {
    "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on",
    "are", "with", "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or",
    "had", "by", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all",
    "there", "when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do",
    "their", "time", "if", "will", "way", "about", "many", "then", "them", "write", "would",
    "like", "so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look",
    "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most", "people",
    "my", "over", "know", "water", "than", "call", "first", "who", "may", "down", "side",
    "been", "now", "find", "government", "understanding", "tokenization", "inference",
    "extraordinary", "morning", "children", "question", "between", "important", "however",
    "wasn't", "don't", "it's", "they're", "we've", "I'll", "o'clock", "e-mail", "state-of-the-art",
};

static char *make_text(size_t n_bytes, size_t *len)
{
    char *s = malloc(n_bytes + 64);
    strata_rng rng;
    strata_rng_seed(&rng, 2024);
    size_t n = 0;
    bool cap = true;
    while (n < n_bytes) {
        uint64_t r = strata_rng_next(&rng);
        const char *w = k_words[r % (sizeof(k_words) / sizeof(k_words[0]))];
        if (r % 97 == 0) {
            n += (size_t)snprintf(s + n, 64, "%u", (unsigned)(r >> 40) % 100000);
        } else {
            size_t wl = strlen(w);
            memcpy(s + n, w, wl);
            if (cap && s[n] >= 'a' && s[n] <= 'z') s[n] = (char)(s[n] - 'a' + 'A');
            n += wl;
        }
        cap = false;
        uint64_t p = (r >> 8) % 100;
        if (p < 6) {
            s[n++] = '.';
            cap = true;
        } else if (p < 11) {
            s[n++] = ',';
        } else if (p == 11) {
            s[n++] = '?';
            cap = true;
        }
        if (cap && (r >> 16) % 8 == 0) {
            s[n++] = '\n';
            s[n++] = '\n';
        } else {
            s[n++] = ' ';
        }
    }
    *len = n;
    return s;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(size > 0 ? (size_t)size : 1);
    *len = size > 0 ? fread(s, 1, (size_t)size, f) : 0;
    fclose(f);
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The reference data: $STRATA_TEST_DATA, else ../shared/data beside the
 * project (found from this file's path, which CMake passes absolute). */
static void data_dir(char *out, size_t n)
{
    const char *env = getenv("STRATA_TEST_DATA");
    if (env != NULL && env[0] != '\0') {
        snprintf(out, n, "%s", env);
        return;
    }
    const char *file = __FILE__;
    const char *slash = strrchr(file, '/');
    if (slash == NULL) {
        snprintf(out, n, "../shared/data");
        return;
    }
    snprintf(out, n, "%.*s/../../shared/data", (int)(slash - file), file);
}

static void bench_one(const char *path, const char *text, size_t len, int reps)
{
    vocab *v;
    strata_err err;
    double t0 = strata_clock_ms();
    if (vocab_open(&v, path, &err) != 0) {
        fprintf(stderr, "bench_tokenize: %s\n", err.msg);
        return;
    }
    double load_ms = strata_clock_ms() - t0;
    double *tok_ms = malloc((size_t)reps * sizeof(double)), *detok_ms = malloc((size_t)reps * sizeof(double));
    size_t n_ids = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        t0 = strata_clock_ms();
        if (tok_tokenize_alloc(v, text, len, false, false, &ids, &n_ids, &err) != 0) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            break;
        }
        tok_ms[r] = strata_clock_ms() - t0;
        char *back;
        size_t n_back;
        t0 = strata_clock_ms();
        if (tok_detokenize_alloc(v, ids, n_ids, 0, &back, &n_back, &err) != 0) {
            fprintf(stderr, "bench_tokenize: %s\n", err.msg);
            free(ids);
            break;
        }
        detok_ms[r] = strata_clock_ms() - t0;
        free(back);
        free(ids);
    }
    double tm = median(tok_ms, reps), dm = median(detok_ms, reps);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    printf("%-28s %-5s load %7.1f ms | tokenize %8.1f ms %7.2f MB/s %8zu ids (%.2f B/id) | "
           "detokenize %6.1f ms %8.1f MB/s\n",
           name, vocab_kind_name(vocab_get_kind(v)), load_ms, tm, (double)len / 1e6 / (tm / 1e3), n_ids,
           n_ids ? (double)len / (double)n_ids : 0.0, dm, (double)len / 1e6 / (dm / 1e3));
    free(tok_ms);
    free(detok_ms);
    vocab_free(v);
}

int main(int argc, char **argv)
{
    const char *text_path = NULL;
    double mb = 1.0;
    int reps = 5;
    const char *vocabs[64];
    int n_vocabs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--text") == 0 && i + 1 < argc) text_path = argv[++i];
        else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) mb = atof(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: bench_tokenize [--text FILE] [--mb N] [--reps N] [VOCAB.gguf ...]\n");
            return 2;
        } else if (n_vocabs < 64) vocabs[n_vocabs++] = argv[i];
    }
    if (reps < 1) reps = 1;
    size_t len;
    char *text = text_path ? read_file(text_path, &len) : make_text((size_t)(mb * 1e6), &len);
    if (text == NULL) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", text_path);
        return 1;
    }
    static char paths[8][4096];
    if (n_vocabs == 0) {
        char dir[3800];
        data_dir(dir, sizeof(dir));
        const char *names[] = {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "qwen35", "gemma-4", "bert-bge"};
        for (int i = 0; i < 7; i++) {
            snprintf(paths[i], sizeof(paths[i]), "%s/tokenizer/ggml-vocab-%s.gguf", dir, names[i]);
            vocabs[n_vocabs++] = paths[i];
        }
    }
    printf("text: %zu bytes (%s), median of %d runs\n", len, text_path ? text_path : "generated English", reps);
    for (int i = 0; i < n_vocabs; i++) bench_one(vocabs[i], text, len, reps);
    free(text);
    return 0;
}
