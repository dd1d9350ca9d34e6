/* Detokenization: round trips detokenize(tokenize(s)) == s for the vocabs
 * that are lossless, a piece for every token of every vocab, the streaming
 * detokenizer against the whole (random texts, random cut points), the
 * bytes it holds back and reports, and llama.cpp's own outputs for
 * stories260K (golden/stories260K-greedy.json). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/rng.h"
#include "testdata.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEPARATOR "\n__ggml_vocab_test__\n"

static vocab *open_vocab(const char *rel)
{
    char path[4096];
    if (testdata_path(path, sizeof(path), rel) == NULL) return NULL;
    vocab *v;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s: %s", rel, err.msg);
    return v;
}

static int32_t find_cstr(const vocab *v, const char *s)
{
    return vocab_find(v, s, strlen(s));
}

static char *detok(const vocab *v, const int32_t *ids, size_t n, unsigned flags, size_t *len)
{
    char *s;
    strata_err err;
    if (tok_detokenize_alloc(v, ids, n, flags, &s, len, &err) != 0) fail_msg("detokenize: %s", err.msg);
    return s;
}

static void assert_bytes(const char *got, size_t n_got, const char *want, size_t n_want, const char *what)
{
    if (n_got != n_want || memcmp(got, want, n_got) != 0) {
        fail_msg("%s: got %zu bytes \"%.*s\", want %zu bytes \"%.*s\"", what, n_got, (int)n_got, got, n_want,
                 (int)n_want, want);
    }
}

/* Tokenize (BOS/EOS added as the vocab does), then detokenize with the
 * flags that undo what tokenizing added: the text must come back. */
static void assert_round_trip(const vocab *v, const char *name, const char *s, size_t n)
{
    int32_t *ids;
    size_t n_ids, n_back;
    strata_err err;
    if (tok_tokenize_alloc(v, s, n, true, false, &ids, &n_ids, &err) != 0) fail_msg("%s: %s", name, err.msg);
    char *back = detok(v, ids, n_ids, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE, &n_back);
    if (n_back != n || memcmp(back, s, n) != 0) {
        fail_msg("%s: round trip of %zu bytes \"%.*s\" gave %zu bytes \"%.*s\"", name, n, (int)n, s, n_back,
                 (int)n_back, back);
    }
    free(back);
    free(ids);
}

static const char *k_lossless[] = {
    "llama-spm", "phi-3", "baichuan", "gpt-2", "gpt-neox", "mpt", "starcoder", "refact",
    "falcon", "deepseek-llm", "deepseek-coder",
};

/* Whether every single byte, alone, comes back: true for byte-fallback
 * SPM and for byte-level BPE vocabs that have all 256 byte pieces (GPT-NeoX
 * has none for bytes that valid UTF-8 never holds). */
static bool byte_complete(const vocab *v)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b, back[8];
        int32_t ids[8];
        size_t n, n_back;
        strata_err err;
        if (tok_tokenize(v, &c, 1, false, false, ids, 8, &n, &err) != 0) return false;
        if (tok_detokenize(v, ids, n, TOK_DETOK_STRIP_LEADING_SPACE, back, sizeof(back), &n_back, &err) != 0 ||
            n_back != 1 || back[0] != c) {
            return false;
        }
    }
    return true;
}

/* n_cp random code points (ASCII mostly, then Latin-1, Cyrillic, CJK and
 * emoji; never U+2581, which SentencePiece reads as a space) as UTF-8. */
static size_t random_utf8(strata_rng *rng, char *out, size_t n_cp)
{
    static const uint32_t lo[] = {0x20, 0x0A, 0xA0, 0x400, 0x4E00, 0x1F600, 0x0E00};
    static const uint32_t span[] = {0x5F, 1, 0x60, 0x60, 0x5000, 0x50, 0x80};
    size_t n = 0;
    for (size_t i = 0; i < n_cp; i++) {
        uint64_t r = strata_rng_next(rng);
        size_t k = r % 10 < 5 ? 0 : 1 + (r / 10) % 6;
        uint32_t cp = lo[k] + (uint32_t)((r >> 20) % span[k]);
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xC0 | (cp >> 6));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xE0 | (cp >> 12));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[n++] = (char)(0xF0 | (cp >> 18));
            out[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return n;
}

/* The suite's 46 inputs (emoji, CJK, Khmer, whitespace runs, ...) and 200
 * random UTF-8 strings through every lossless vocab; where every byte has
 * a piece, 200 strings of arbitrary bytes (invalid UTF-8 included) too.
 * SentencePiece is lossless for text without a literal "▁" (which it reads
 * as a space), so the random strings never hold one. */
static void test_round_trips(void **state)
{
    (void)state;
    char inp_path[4096];
    TESTDATA_FILE(inp_path, "tokenizer/ggml-vocab-llama-spm.gguf.inp");
    size_t size;
    char *inp = testdata_read_file(inp_path, &size);
    assert_non_null(inp);
    size_t n_byte_complete = 0;
    for (size_t k = 0; k < sizeof(k_lossless) / sizeof(k_lossless[0]); k++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", k_lossless[k]);
        vocab *v = open_vocab(rel);
        assert_non_null(v);
        size_t n_cases = 0, sep = strlen(SEPARATOR);
        for (size_t pos = 0, at = 0; pos < size; pos = at + sep) {
            for (at = pos; at + sep <= size && memcmp(inp + at, SEPARATOR, sep) != 0;) at++;
            if (at + sep > size) break;
            assert_round_trip(v, k_lossless[k], inp + pos, at - pos);
            n_cases++;
        }
        assert_int_equal(n_cases, 46);

        strata_rng rng;
        strata_rng_seed(&rng, 1234 + k);
        char buf[256];
        for (int i = 0; i < 200; i++) {
            size_t n = random_utf8(&rng, buf, strata_rng_next(&rng) % 48);
            assert_round_trip(v, k_lossless[k], buf, n);
        }
        bool expect_complete = strcmp(k_lossless[k], "llama-spm") == 0 || strcmp(k_lossless[k], "phi-3") == 0 ||
                               strcmp(k_lossless[k], "baichuan") == 0 || strcmp(k_lossless[k], "gpt-2") == 0;
        if (byte_complete(v) != expect_complete) {
            fail_msg("%s: every byte round-trips: %d, expected %d", k_lossless[k], !expect_complete,
                     expect_complete);
        }
        if (expect_complete) {
            n_byte_complete++;
            for (int i = 0; i < 200; i++) {
                size_t n = strata_rng_next(&rng) % 64;
                for (size_t j = 0; j < n; j++) {
                    uint8_t b = (uint8_t)strata_rng_next(&rng);
                    buf[j] = (char)(b == 0xE2 ? ' ' : b);
                }
                assert_round_trip(v, k_lossless[k], buf, n);
            }
        }
        vocab_free(v);
    }
    /* SPM with byte fallback and GPT-2 have a piece for every byte. The
     * others lack some bytes that valid UTF-8 never holds (GPT-NeoX family,
     * StarCoder), keep them as user-defined characters that decode as text
     * (DeepSeek, as Hugging Face does), or lack some control bytes and have
     * no UNK (Falcon). */
    assert_int_equal(n_byte_complete, 4);
    free(inp);
}

/* WordPiece is lossy (case, accents, spacing around punctuation) but plain
 * lowercase words come back. */
static void test_wordpiece_text_back(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    vocab *v = open_vocab("tokenizer/ggml-vocab-bert-bge.gguf");
    int32_t ids[16];
    size_t n, n_back;
    strata_err err;
    assert_int_equal(tok_tokenize(v, "Hello World", 11, true, false, ids, 16, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 101); /* [CLS] */
    assert_int_equal(ids[3], 102); /* [SEP] */
    char *back = detok(v, ids, n, TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE, &n_back);
    assert_bytes(back, n_back, "hello world", 11, "bert");
    free(back);
    back = detok(v, ids, n, TOK_DETOK_SPECIAL, &n_back);
    assert_bytes(back, n_back, "[CLS] hello world[SEP]", 22, "bert with specials");
    free(back);
    /* "discards" is "▁disc" + "ards": the continuation joins. */
    assert_int_equal(tok_tokenize(v, "discards", 8, false, false, ids, 16, &n, &err), 0);
    assert_int_equal(n, 2);
    back = detok(v, ids, n, TOK_DETOK_STRIP_LEADING_SPACE, &n_back);
    assert_bytes(back, n_back, "discards", 8, "bert continuation");
    free(back);
    vocab_free(v);
}

static const char *k_all_vocabs[] = {
    "llama-spm", "phi-3", "baichuan", "gpt-2", "gpt-neox", "mpt", "starcoder",
    "refact", "falcon", "deepseek-llm", "deepseek-coder", "bert-bge",
};

/* Every token of every vocab has a piece, with and without special
 * rendering; byte pieces are their byte; control tokens render only when
 * asked. */
static void test_every_token_has_a_piece(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    char *buf = malloc(TOK_MAX_PIECE_BYTES);
    strata_err err;
    for (size_t k = 0; k < sizeof(k_all_vocabs) / sizeof(k_all_vocabs[0]); k++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", k_all_vocabs[k]);
        vocab *v = open_vocab(rel);
        assert_non_null(v);
        size_t n_empty_plain = 0;
        for (int32_t id = 0; id < vocab_n_tokens(v); id++) {
            size_t n_plain, n_special, n_text;
            const char *text = vocab_token_text(v, id, &n_text);
            if (tok_token_to_piece(v, id, false, buf, TOK_MAX_PIECE_BYTES, &n_plain, &err) != 0 ||
                tok_token_to_piece(v, id, true, buf, TOK_MAX_PIECE_BYTES, &n_special, &err) != 0) {
                fail_msg("%s token %d: %s", k_all_vocabs[k], id, err.msg);
            }
            enum vocab_token_type t = vocab_token_type(v, id);
            if (vocab_is_control(v, id)) {
                if (n_plain != 0) fail_msg("%s control token %d gives text", k_all_vocabs[k], id);
                assert_int_equal(n_special, n_text);
                assert_memory_equal(buf, text, n_text);
            } else if (t == VOCAB_TOKEN_BYTE) {
                assert_int_equal(n_plain, 1);
                assert_int_equal((uint8_t)buf[0], (uint8_t)strtol(text + 3, NULL, 16));
            } else {
                assert_int_equal(n_plain, n_special);
            }
            n_empty_plain += n_plain == 0;
        }
        /* Only control-type tokens (and empty texts) come out empty. */
        size_t n_control = 0;
        for (int32_t id = 0; id < vocab_n_tokens(v); id++) n_control += vocab_is_control(v, id);
        if (n_empty_plain > n_control + 1) {
            fail_msg("%s: %zu empty pieces for %zu control tokens", k_all_vocabs[k], n_empty_plain, n_control);
        }
        vocab_free(v);
    }
    free(buf);
}

static void assert_piece(const vocab *v, int32_t id, const char *want)
{
    char buf[64];
    size_t n;
    strata_err err;
    assert_true(id >= 0);
    assert_int_equal(tok_token_to_piece(v, id, false, buf, sizeof(buf), &n, &err), 0);
    assert_bytes(buf, n, want, strlen(want), "piece");
}

static void test_known_pieces(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    assert_piece(v, 13, "\n");        /* <0x0A> */
    assert_piece(v, 29871, " ");      /* ▁ */
    assert_piece(v, 15043, " Hello"); /* ▁Hello */
    assert_piece(v, 1, "");           /* <s> without special rendering */
    char buf[8];
    size_t n;
    strata_err err;
    assert_int_equal(tok_token_to_piece(v, 1, true, buf, sizeof(buf), &n, &err), 0);
    assert_bytes(buf, n, "<s>", 3, "special");
    /* Room too small: the length needed, and the error says so. */
    assert_int_equal(tok_token_to_piece(v, 15043, false, buf, 3, &n, &err), STRATA_ERANGE);
    assert_int_equal(n, 6);
    assert_int_equal(tok_token_to_piece(v, 32000, false, buf, sizeof(buf), &n, &err), STRATA_EINVAL);
    assert_non_null(strstr(err.msg, "32000"));
    assert_int_equal(tok_token_to_piece(v, -1, false, buf, sizeof(buf), &n, &err), STRATA_EINVAL);
    vocab_free(v);

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-gpt-2.gguf");
    v = open_vocab("tokenizer/ggml-vocab-gpt-2.gguf");
    assert_piece(v, find_cstr(v, "\xc4\xa0the"), " the"); /* Ġthe */
    assert_piece(v, find_cstr(v, "\xc4\x8a"), "\n");       /* Ċ */
    assert_piece(v, find_cstr(v, "\xc3\xa6"), "\xe6");     /* æ: the byte 0xE6 alone */
    vocab_free(v);
}

/* --- streaming ------------------------------------------------------------ */

/* Each chunk the stream hands out for valid input must be whole characters. */
static void assert_whole_chars(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (c >= 0x80 && c < 0xC0) fail_msg("chunk starts inside a character at byte %zu", i);
        if (i + len > n) fail_msg("chunk ends inside a character (byte %zu of %zu)", i, n);
        for (size_t k = 1; k < len; k++) {
            if (((uint8_t)s[i + k] & 0xC0) != 0x80) fail_msg("broken character at byte %zu", i);
        }
        i += len;
    }
}

typedef struct stream_out {
    char *bytes;
    size_t n;
    size_t n_incomplete;
} stream_out;

/* Feeds ids one at a time; checks chunks when check_chunks. */
static stream_out run_stream(const vocab *v, const int32_t *ids, size_t n, unsigned flags, bool check_chunks)
{
    tok_stream s;
    tok_stream_init(&s, v, flags);
    stream_out o = {malloc(64), 0, 0};
    size_t cap = 64;
    strata_err err;
    for (size_t i = 0; i <= n; i++) {
        const char *text;
        size_t n_text;
        if (i < n) {
            if (tok_stream_push(&s, ids[i], &text, &n_text, &err) != 0) fail_msg("push: %s", err.msg);
            if (check_chunks) assert_whole_chars(text, n_text);
        } else {
            if (tok_stream_finish(&s, &text, &n_text, &o.n_incomplete, &err) != 0) fail_msg("finish: %s", err.msg);
        }
        while (o.n + n_text > cap) cap *= 2;
        o.bytes = realloc(o.bytes, cap);
        memcpy(o.bytes + o.n, text, n_text);
        o.n += n_text;
    }
    tok_stream_free(&s);
    return o;
}

static const char *k_pool[] = {
    "a", "b", " ", "\n", "the", "\xc3\xa9" /* é */, "\xd1\x8f" /* я */, "\xe2\x82\xac" /* € */,
    "\xe6\x88\x91" /* 我 */, "\xe6\x97\xa5\xe6\x9c\xac" /* 日本 */, "\xf0\x9f\xa6\x99" /* 🦙 */,
    "\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f" /* 😶‍🌫️ */, "\xe1\x9e\x80" /* ក */,
};

/* Random multi-byte texts through byte-fallback SPM, byte-level BPE and
 * WordPiece: streamed token by token, every chunk is whole characters and
 * the chunks add up to the whole detokenization. Then the same ids cut at
 * random points: the stream's output plus its leftover is the whole of the
 * prefix, and the leftover is exactly the unfinished character. */
static void test_stream_matches_whole(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    const char *names[] = {"llama-spm", "gpt-2", "deepseek-llm", "bert-bge"};
    const unsigned flag_sets[] = {0, TOK_DETOK_SPECIAL | TOK_DETOK_REMOVE_SPECIAL,
                                  TOK_DETOK_REMOVE_SPECIAL | TOK_DETOK_STRIP_LEADING_SPACE};
    strata_rng rng;
    strata_rng_seed(&rng, 42);
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", names[k]);
        vocab *v = open_vocab(rel);
        assert_non_null(v);
        size_t n_partial_seen = 0;
        for (int round = 0; round < 200; round++) {
            char text[512];
            size_t n_text = 0;
            size_t n_parts = 1 + strata_rng_next(&rng) % 24;
            for (size_t p = 0; p < n_parts; p++) {
                const char *part = k_pool[strata_rng_next(&rng) % (sizeof(k_pool) / sizeof(k_pool[0]))];
                memcpy(text + n_text, part, strlen(part));
                n_text += strlen(part);
            }
            int32_t *ids;
            size_t n_ids;
            strata_err err;
            if (tok_tokenize_alloc(v, text, n_text, true, false, &ids, &n_ids, &err) != 0) {
                fail_msg("%s: %s", names[k], err.msg);
            }
            unsigned flags = flag_sets[round % 3];
            size_t n_whole;
            char *whole = detok(v, ids, n_ids, flags, &n_whole);
            stream_out o = run_stream(v, ids, n_ids, flags, true);
            assert_bytes(o.bytes, o.n, whole, n_whole, names[k]);
            assert_int_equal(o.n_incomplete, 0);
            free(o.bytes);
            free(whole);

            /* A random prefix of the ids. */
            size_t cut = n_ids ? strata_rng_next(&rng) % (n_ids + 1) : 0;
            whole = detok(v, ids, cut, 0, &n_whole);
            o = run_stream(v, ids, cut, 0, false);
            assert_bytes(o.bytes, o.n, whole, n_whole, "prefix");
            assert_whole_chars(o.bytes, o.n - o.n_incomplete);
            assert_true(o.n_incomplete <= 3);
            if (o.n_incomplete > 0) {
                n_partial_seen++;
                uint8_t lead = (uint8_t)o.bytes[o.n - o.n_incomplete];
                assert_true(lead >= 0xC2 && lead <= 0xF4);
            }
            free(o.bytes);
            free(whole);
            free(ids);
        }
        /* Byte-level vocabs really do end tokens inside characters. */
        if (strcmp(names[k], "bert-bge") != 0 && n_partial_seen == 0) {
            fail_msg("%s: no cut ever fell inside a character; the test proves nothing", names[k]);
        }
        vocab_free(v);
    }
}

static void push_expect(tok_stream *s, int32_t id, const char *want, size_t n_want)
{
    const char *text;
    size_t n;
    strata_err err;
    assert_int_equal(tok_stream_push(s, id, &text, &n, &err), 0);
    assert_bytes(text, n, want, n_want, "stream push");
}

/* Byte pieces one at a time: nothing until the character completes;
 * leftovers are reported at the end; bytes that can never complete a
 * character pass straight through. */
static void test_stream_holds_bytes(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
#define BYTE_ID(b) (3 + (b)) /* <0x00> is id 3 in the Llama vocab */
    assert_int_equal(find_cstr(v, "<0xE6>"), BYTE_ID(0xE6));
    tok_stream s;
    tok_stream_init(&s, v, 0);
    push_expect(&s, BYTE_ID(0xE6), "", 0);
    push_expect(&s, BYTE_ID(0x88), "", 0);
    push_expect(&s, BYTE_ID(0x91), "\xe6\x88\x91", 3); /* 我 */
    push_expect(&s, 15043, " Hello", 6);
    push_expect(&s, BYTE_ID(0xF0), "", 0);
    push_expect(&s, BYTE_ID(0x9F), "", 0);
    const char *text;
    size_t n, n_incomplete;
    strata_err err;
    assert_int_equal(tok_stream_finish(&s, &text, &n, &n_incomplete, &err), 0);
    assert_int_equal(n_incomplete, 2);
    assert_bytes(text, n, "\xf0\x9f", 2, "leftover");

    /* After finish the stream starts over. A lead byte followed by a
     * non-continuation is no character: both go out at once. */
    push_expect(&s, BYTE_ID(0xE6), "", 0);
    push_expect(&s, 29874, "\xe6" "a", 2); /* "a" */
    push_expect(&s, BYTE_ID(0xFF), "\xff", 1);
    push_expect(&s, BYTE_ID(0x80), "\x80", 1);
    /* E0 80 would be an overlong form: not held. */
    push_expect(&s, BYTE_ID(0xE0), "", 0);
    push_expect(&s, BYTE_ID(0x80), "\xe0\x80", 2);
    assert_int_equal(tok_stream_finish(&s, &text, &n, &n_incomplete, &err), 0);
    assert_int_equal(n_incomplete, 0);
    assert_int_equal(n, 0);
    assert_int_equal(tok_stream_push(&s, 32000, &text, &n, &err), STRATA_EINVAL);
    tok_stream_free(&s);
    vocab_free(v);
}

/* REMOVE_SPECIAL drops a leading BOS and a trailing EOS, and only those
 * the vocab adds (Llama adds no EOS). The stream holds an EOS back until
 * the next token shows whether it was the last. */
static void test_stream_remove_special(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    const int32_t ids[] = {1, 15043, 2, 3186, 2};
    unsigned flags = TOK_DETOK_SPECIAL | TOK_DETOK_REMOVE_SPECIAL;
    size_t n;
    char *whole = detok(v, ids, 5, flags, &n);
    assert_bytes(whole, n, " Hello</s> world</s>", 20, "whole");
    stream_out o = run_stream(v, ids, 5, flags, true);
    assert_bytes(o.bytes, o.n, whole, n, "stream");
    free(o.bytes);
    free(whole);
    whole = detok(v, ids, 5, flags | TOK_DETOK_STRIP_LEADING_SPACE, &n);
    assert_bytes(whole, n, "Hello</s> world</s>", 19, "stripped");
    free(whole);
    whole = detok(v, ids, 5, TOK_DETOK_SPECIAL, &n);
    assert_bytes(whole, n, "<s> Hello</s> world</s>", 23, "all");
    free(whole);
    vocab_free(v);

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    v = open_vocab("tokenizer/ggml-vocab-bert-bge.gguf");
    const int32_t bids[] = {101, 7592, 102, 2088, 102}; /* [CLS] hello [SEP] world [SEP] */
    whole = detok(v, bids, 5, flags, &n);
    assert_bytes(whole, n, " hello[SEP] world", 17, "bert whole");
    o = run_stream(v, bids, 5, flags, true);
    assert_bytes(o.bytes, o.n, whole, n, "bert stream");
    free(o.bytes);
    free(whole);
    tok_stream s;
    tok_stream_init(&s, v, flags);
    push_expect(&s, 101, "", 0);
    push_expect(&s, 7592, " hello", 6);
    push_expect(&s, 102, "", 0);               /* held: maybe the last */
    push_expect(&s, 101, "[SEP][CLS]", 10);    /* it was not; a later CLS stays */
    const char *text;
    size_t n_incomplete;
    strata_err err;
    push_expect(&s, 102, "", 0);
    assert_int_equal(tok_stream_finish(&s, &text, &n, &n_incomplete, &err), 0);
    assert_int_equal(n, 0); /* the final SEP is dropped */
    tok_stream_free(&s);
    vocab_free(v);
}

static void test_detokenize_room(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_vocab("tokenizer/ggml-vocab-llama-spm.gguf");
    const int32_t ids[] = {15043, 3186};
    char buf[8];
    size_t n;
    strata_err err;
    assert_int_equal(tok_detokenize(v, ids, 2, 0, buf, 8, &n, &err), STRATA_ERANGE);
    assert_int_equal(n, 12);
    assert_memory_equal(buf, " Hello w", 8);
    assert_int_equal(tok_detokenize(v, ids, 2, 0, NULL, 0, &n, &err), STRATA_ERANGE);
    assert_int_equal(n, 12);
    const int32_t bad[] = {15043, -5};
    assert_int_equal(tok_detokenize(v, bad, 2, 0, buf, 8, &n, &err), STRATA_EINVAL);
    vocab_free(v);
}

/* llama.cpp on stories260K: the prompt ids it fed, the text it printed
 * (pieces with special rendering) and llama_detokenize of the whole
 * sequence with remove_special (a removed BOS keeps the leading space). */
static void test_golden_stories260k(void **state)
{
    (void)state;
    char path[4096], model[4096];
    TESTDATA_FILE(path, "golden/stories260K-greedy.json");
    TESTDATA_FILE(model, "models/stories260K.gguf");
    vocab *v;
    strata_err err;
    if (vocab_open(&v, model, &err) != 0) fail_msg("%s", err.msg);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    assert_non_null(root);
    json_t *results = json_object_get(root, "results");
    assert_true(json_array_size(results) >= 4);
    for (size_t r = 0; r < json_array_size(results); r++) {
        json_t *res = json_array_get(results, r);
        const char *prompt = json_string_value(json_object_get(res, "prompt"));
        json_t *pj = json_object_get(res, "prompt_ids"), *gj = json_object_get(res, "gen_ids");
        size_t n_p = json_array_size(pj), n_g = json_array_size(gj);
        int32_t *all = malloc((n_p + n_g) * sizeof(*all));
        for (size_t i = 0; i < n_p; i++) all[i] = (int32_t)json_integer_value(json_array_get(pj, i));
        for (size_t i = 0; i < n_g; i++) all[n_p + i] = (int32_t)json_integer_value(json_array_get(gj, i));

        int32_t *ids;
        size_t n_ids;
        assert_int_equal(tok_tokenize_alloc(v, prompt, strlen(prompt), true, false, &ids, &n_ids, &err), 0);
        assert_int_equal(n_ids, n_p);
        assert_memory_equal(ids, all, n_p * sizeof(*ids));
        free(ids);

        const char *text = json_string_value(json_object_get(res, "text"));
        const char *full = json_string_value(json_object_get(res, "full_text"));
        size_t n;
        char *got = detok(v, all + n_p, n_g, TOK_DETOK_SPECIAL, &n);
        assert_bytes(got, n, text, strlen(text), "text");
        free(got);
        stream_out o = run_stream(v, all + n_p, n_g, TOK_DETOK_SPECIAL, true);
        assert_bytes(o.bytes, o.n, text, strlen(text), "streamed text");
        free(o.bytes);
        got = detok(v, all, n_p + n_g, TOK_DETOK_REMOVE_SPECIAL, &n);
        assert_bytes(got, n, full, strlen(full), "full_text");
        free(got);
        free(all);
    }
    json_decref(root);
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_wordpiece_text_back),
        cmocka_unit_test(test_every_token_has_a_piece),
        cmocka_unit_test(test_known_pieces),
        cmocka_unit_test(test_stream_matches_whole),
        cmocka_unit_test(test_stream_holds_bytes),
        cmocka_unit_test(test_stream_remove_special),
        cmocka_unit_test(test_detokenize_room),
        cmocka_unit_test(test_golden_stories260k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
