/* libFuzzer target for the tokenizers and detokenizers: any bytes are
 * tokenized with one of eight real vocabs loaded once (Llama and Phi-3
 * SentencePiece, GPT-2, DeepSeek-LLM, Qwen 3.5 and Llama 3 byte-level BPE,
 * Gemma 4's character BPE, BERT WordPiece), then detokenized whole and
 * through the streaming detokenizer. Checked on every input:
 *   - every id is in the vocab, and asking with too little room reports
 *     the same count;
 *   - the stream's output plus its leftover equals the whole
 *     detokenization, and the leftover is at most 3 bytes;
 *   - for the vocabs with a piece for every byte (Llama, GPT-2, Qwen 3.5,
 *     Llama 3, Gemma 4), the text comes back exactly (special text not
 *     parsed; for Llama and Gemma 4, text without a literal "▁", which
 *     they read as a space). Phi-3 is not lossless: its special tokens
 *     swallow the whitespace after them.
 * A crash, a sanitizer report or a failed check (a trap) is a finding.
 *
 * The first input byte chooses the vocab (bits 0-1, plus 4 when bit 5 is
 * set), add_special (bit 2), parse_special (bit 3) and rendering special
 * tokens (bit 4); the rest is the text. The vocabs come from
 * $STRATA_TEST_DATA/tokenizer, else ../shared/data/tokenizer beside the
 * project. */
#include "text/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_VOCABS 8
static const char *const k_names[N_VOCABS] = {"llama-spm", "gpt-2", "deepseek-llm", "bert-bge",
                                              "qwen35",    "gemma-4", "phi-3",      "llama-bpe"};
/* Whether tokenizing then detokenizing gives the bytes back (see above). */
static const bool k_lossless[N_VOCABS] = {true, true, false, false, true, true, false, true};
static const bool k_reads_spm_space[N_VOCABS] = {true, false, false, false, false, true, true, false};
static vocab *g_vocabs[N_VOCABS];

static void check(int ok)
{
    if (!ok) __builtin_trap();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[4096];
    const char *env = getenv("STRATA_TEST_DATA");
    if (env != NULL && env[0] != '\0') {
        snprintf(dir, sizeof(dir), "%s", env);
    } else {
        const char *file = __FILE__, *slash = strrchr(file, '/');
        /* this file is tests/fuzz/fuzz_tokenize.c under the project */
        snprintf(dir, sizeof(dir), "%.*s/../../../shared/data", slash ? (int)(slash - file) : 1,
                 slash ? file : ".");
    }
    for (int i = 0; i < N_VOCABS; i++) {
        char path[4300];
        strata_err err;
        snprintf(path, sizeof(path), "%s/tokenizer/ggml-vocab-%s.gguf", dir, k_names[i]);
        if (vocab_open(&g_vocabs[i], path, &err) != 0) {
            fprintf(stderr, "fuzz_tokenize: %s (set STRATA_TEST_DATA)\n", err.msg);
            exit(1);
        }
    }
    return 0;
}

static bool has_spm_space(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++) {
        if (s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t ctl = data[0];
    int which = (ctl & 3) | ((ctl >> 3) & 4);
    bool add_special = (ctl & 4) != 0, parse_special = (ctl & 8) != 0;
    const vocab *v = g_vocabs[which];
    size_t len = size - 1;
    /* An exactly sized copy, so reads past the text are caught. */
    char *text = malloc(len ? len : 1);
    if (len) memcpy(text, data + 1, len);

    int32_t *ids;
    size_t n_ids;
    strata_err err;
    int rc = tok_tokenize_alloc(v, text, len, add_special, parse_special, &ids, &n_ids, &err);
    check(rc == 0);
    for (size_t i = 0; i < n_ids; i++) check(ids[i] >= 0 && ids[i] < vocab_n_tokens(v));
    size_t n_count;
    if (n_ids > 0) {
        check(tok_tokenize(v, text, len, add_special, parse_special, NULL, 0, &n_count, &err) == STRATA_ERANGE);
        check(n_count == n_ids);
    }

    unsigned flags = TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE | (ctl & 16 ? TOK_DETOK_SPECIAL : 0);
    char *whole;
    size_t n_whole;
    check(tok_detokenize_alloc(v, ids, n_ids, flags, &whole, &n_whole, &err) == 0);

    tok_stream s;
    tok_stream_init(&s, v, flags);
    char *streamed = malloc(n_whole + 4);
    size_t n_streamed = 0;
    for (size_t i = 0; i <= n_ids; i++) {
        const char *out;
        size_t n_out, n_incomplete = 0;
        if (i < n_ids) check(tok_stream_push(&s, ids[i], &out, &n_out, &err) == 0);
        else check(tok_stream_finish(&s, &out, &n_out, &n_incomplete, &err) == 0);
        check(n_streamed + n_out <= n_whole);
        memcpy(streamed + n_streamed, out, n_out);
        n_streamed += n_out;
        check(n_incomplete <= 3);
    }
    tok_stream_free(&s);
    check(n_streamed == n_whole && memcmp(streamed, whole, n_whole) == 0);

    bool lossless = !parse_special && k_lossless[which] &&
                    !(k_reads_spm_space[which] && has_spm_space(data + 1, len));
    if (lossless && !(ctl & 16)) check(n_whole == len && memcmp(whole, text, len) == 0);

    free(streamed);
    free(whole);
    free(ids);
    free(text);
    return 0;
}
