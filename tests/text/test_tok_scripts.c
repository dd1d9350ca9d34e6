/* The real vocabularies of ../shared/data/tokenizer on inputs outside
 * llama.cpp's public suite: scripts (CJK, Hangul, Arabic, Devanagari,
 * Cyrillic, Greek, emoji with ZWJ), combining marks, control and space
 * characters, special tokens with special-token parsing on and off.
 *
 * Where the result follows from the vocab and the written rules alone, the
 * expected ids are spelled as token texts that are looked up in the vocab
 * (so a test names what it expects, and a missing text fails loudly rather
 * than comparing against -1). Where it needs merges nobody can do by hand
 * (byte-level BPE), the tests check invariants that a real bug breaks:
 * decoding gives the input back byte for byte, and a control token's text
 * never becomes that token unless special-token parsing is on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testdata.h"
#include "text/tokenizer.h"
#include "text/vocab_internal.h" /* the pre-tokenizer's splits */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- helpers -------------------------------------------------------------- */

static vocab *open_vocab(const char *name)
{
    char rel[256], path[4096];
    snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", name);
    if (testdata_path(path, sizeof(path), rel) == NULL) return NULL;
    vocab *v;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s: %s", name, err.msg);
    return v;
}

/* Skips the test when the data is missing. */
#define OPEN(var, name)                                                        \
    do {                                                                       \
        char path_[4096];                                                      \
        TESTDATA_FILE(path_, "tokenizer/ggml-vocab-" name ".gguf");            \
        (var) = open_vocab(name);                                              \
        assert_non_null(var);                                                  \
    } while (0)

static int32_t *tokenize(const vocab *v, const char *s, size_t len, bool add_special, bool parse_special,
                         size_t *n)
{
    int32_t *ids;
    strata_err err;
    if (tok_tokenize_alloc(v, s, len, add_special, parse_special, &ids, n, &err) != 0) {
        fail_msg("tokenize: %s", err.msg);
    }
    return ids;
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    print_message("    %s:", label);
    for (size_t i = 0; i < n; i++) print_message(" %d", ids[i]);
    print_message("\n");
}

/* The id of a token text that must exist. */
static int32_t id_of(const vocab *v, const char *text)
{
    int32_t id = vocab_find(v, text, strlen(text));
    if (id < 0) fail_msg("the vocab has no token \"%s\"", text);
    return id;
}

/* Tokenizing s (no BOS/EOS) gives exactly the tokens whose texts are
 * pieces[0..n), NULL-terminated. */
static void expect_pieces(const vocab *v, const char *s, size_t len, bool parse_special,
                          const char *const *pieces)
{
    int32_t want[256];
    size_t n_want = 0;
    for (; pieces[n_want] != NULL; n_want++) {
        assert_true(n_want < 256);
        want[n_want] = id_of(v, pieces[n_want]);
    }
    size_t n_got;
    int32_t *got = tokenize(v, s, len, false, parse_special, &n_got);
    bool same = n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof(*got)) == 0);
    if (!same) {
        print_message("  input of %zu bytes tokenizes differently\n", len);
        print_ids("want", want, n_want);
        print_ids("got ", got, n_got);
    }
    free(got);
    assert_true(same);
}

#define EXPECT(v, s, parse, ...)                                               \
    do {                                                                       \
        static const char *const pieces_[] = {__VA_ARGS__, NULL};              \
        expect_pieces((v), (s), sizeof(s) - 1, (parse), pieces_);             \
    } while (0)

/* decode(encode(s)) == s, byte for byte, with parse_special off. */
static void expect_round_trip(const vocab *v, const char *s, size_t len, unsigned flags)
{
    size_t n;
    int32_t *ids = tokenize(v, s, len, false, false, &n);
    char *back;
    size_t n_back;
    strata_err err;
    if (tok_detokenize_alloc(v, ids, n, flags, &back, &n_back, &err) != 0) fail_msg("%s", err.msg);
    if (n_back != len || memcmp(back, s, len) != 0) {
        print_message("  round trip of %zu bytes gave %zu bytes: \"%.*s\"\n", len, n_back, (int)n_back, back);
    }
    assert_int_equal(n_back, len);
    assert_memory_equal(back, s, len);
    free(back);
    free(ids);
}

/* Inputs every vocab should get through, each in several scripts. */
static const char *const k_scripts[] = {
    "日本語のテキストと中文，還有한국어 문장.",
    "مرحبا بالعالم، كيف حالك؟",
    "नमस्ते दुनिया, क्या हाल है?",
    "Привет, МИР! Ελληνικά ΚΕΦΑΛΑΙΑ άέή",
    "family: \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 coder: "
    "\xf0\x9f\xa7\x91\xe2\x80\x8d\xf0\x9f\x92\xbb flag: \xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
    "Vie\xcc\xa3\xcc\x82t Nam, cafe\xcc\x81 e\xcc\x81" "clair, n\xcc\x83",
    "tabs\tand\r\nnewlines\n\n\n  spaces   \xc2\xa0nbsp\xe2\x80\x8bzwsp",
    "  leading and trailing  ",
};

/* --- bert-bge (WordPiece) -------------------------------------------------- */

static void test_bert_accents_and_case(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "bert-bge");
    /* Precomposed accents: each character becomes the first of its NFD. */
    EXPECT(v, "Café naïve", false, "\xe2\x96\x81" "cafe", "\xe2\x96\x81" "naive");
    /* A combining mark after its letter is dropped (category M). */
    EXPECT(v, "e\xcc\x81" "clair", false, "\xe2\x96\x81" "ec", "lai", "r");
    /* Cyrillic and Greek capitals lowercase; Greek tonos goes with NFD. */
    EXPECT(v, "ПРИВЕТ", false, "\xe2\x96\x81п", "р", "и", "в", "е", "т");
    EXPECT(v, "ΑΘΉΝΑ", false, "\xe2\x96\x81α", "θ", "η", "ν", "α");
    /* Devanagari's vowel sign AA (U+093E) is a spacing mark (Mc): dropped
     * with the other marks, as llama.cpp does. */
    EXPECT(v, "का", false, "\xe2\x96\x81क");
    /* नमस्ते: the virama and the vowel sign E (Mn) go, the consonants stay
     * one word. Arabic letters are a word of their own pieces. */
    EXPECT(v, "नमस्ते", false, "\xe2\x96\x81न", "म", "स", "त");
    EXPECT(v, "مرحبا", false, "\xe2\x96\x81م", "ر", "ح", "ب", "ا");
    /* An emoji family: the ZWJs (Cf) vanish, the three emoji (So, not
     * ASCII) make one word, which no tokens cover. */
    EXPECT(v, "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 a", false, "[UNK]",
           "\xe2\x96\x81" "a");
    vocab_free(v);
}

static void test_bert_hangul_and_cjk(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "bert-bge");
    /* Each syllable becomes its leading consonant jamo only (the first
     * character of its NFD): 안녕하세요 -> ᄋ ᄂ ᄒ ᄉ ᄋ, one word. */
    EXPECT(v, "안녕하세요", false, "\xe2\x96\x81\xe1\x84\x8b", "\xe1\x84\x82", "\xe1\x84\x92",
           "\xe1\x84\x89", "\xe1\x84\x8b");
    /* CJK ideographs are words of one character each; a fullwidth comma is
     * punctuation, a word of its own. */
    EXPECT(v, "日本語", false, "\xe2\x96\x81日", "\xe2\x96\x81本", "\xe2\x96\x81語");
    EXPECT(v, "世，世", false, "\xe2\x96\x81世", "\xe2\x96\x81，", "\xe2\x96\x81世");
    /* An ideograph the vocab lacks is UNK on its own, not with its
     * neighbours. */
    EXPECT(v, "世界", false, "\xe2\x96\x81世", "[UNK]");
    /* U+2B820 (Extension E) is outside the ideograph ranges that split:
     * "a", it, "b" are one word, which no tokens cover. */
    EXPECT(v, "a\xf0\xab\xa0\xa0" "b", false, "[UNK]");
    vocab_free(v);
}

static void test_bert_controls_and_spaces(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "bert-bge");
    /* Controls (Cc) and format characters (Cf: ZWSP, soft hyphen) vanish
     * inside a word. */
    EXPECT(v, "hel\x07lo wor\xe2\x80\x8bld", false, "\xe2\x96\x81hello", "\xe2\x96\x81world");
    EXPECT(v, "hel\xc2\xadlo", false, "\xe2\x96\x81hello");
    /* Every White_Space character separates words: the line and paragraph
     * separators, NEL, vertical tab, form feed, ideographic space. */
    EXPECT(v, "a\xe2\x80\xa8" "b\xe2\x80\xa9" "a\xc2\x85" "b\x0b" "a\x0c" "b\xe3\x80\x80" "a", false,
           "\xe2\x96\x81" "a", "\xe2\x96\x81" "b", "\xe2\x96\x81" "a", "\xe2\x96\x81" "b", "\xe2\x96\x81" "a",
           "\xe2\x96\x81" "b", "\xe2\x96\x81" "a");
    /* No limit on a word's length (llama.cpp's WPM has none): 101 letters
     * are matched greedily, "▁aaa" then pairs. */
    char word[102];
    memset(word, 'a', 101);
    word[101] = '\0';
    const char *pieces[52];
    pieces[0] = "\xe2\x96\x81" "aaa";
    for (int i = 1; i <= 49; i++) pieces[i] = "aa";
    pieces[50] = NULL;
    expect_pieces(v, word, 101, false, pieces);
    vocab_free(v);
}

static void test_bert_specials(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "bert-bge");
    EXPECT(v, "[CLS] hi [SEP]", true, "[CLS]", "\xe2\x96\x81hi", "[SEP]");
    /* As text: brackets are punctuation, the name is lowercased. */
    EXPECT(v, "[CLS] hi", false, "\xe2\x96\x81[", "\xe2\x96\x81" "cl", "s", "\xe2\x96\x81]", "\xe2\x96\x81hi");
    vocab_free(v);
}

/* --- phi-3 (SentencePiece with control and user-defined tokens) ------------ */

/* ids = what tokenizing the parts one after the other gives: a part that
 * starts with '\x01' is the special token whose text follows; any other
 * is plain text tokenized with parsing off (SentencePiece's prefix space
 * included, as after a special token). */
static void expect_parts(const vocab *v, const char *s, bool parse_special, const char *const *parts)
{
    int32_t want[256];
    size_t n_want = 0;
    for (size_t p = 0; parts[p] != NULL; p++) {
        if (parts[p][0] == '\x01') {
            want[n_want++] = id_of(v, parts[p] + 1);
            continue;
        }
        size_t n;
        int32_t *ids = tokenize(v, parts[p], strlen(parts[p]), false, false, &n);
        assert_true(n_want + n <= 256);
        memcpy(want + n_want, ids, n * sizeof(*ids));
        n_want += n;
        free(ids);
    }
    size_t n_got;
    int32_t *got = tokenize(v, s, strlen(s), false, parse_special, &n_got);
    bool same = n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof(*got)) == 0);
    if (!same) {
        print_message("  \"%s\" tokenizes differently\n", s);
        print_ids("want", want, n_want);
        print_ids("got ", got, n_got);
    }
    free(got);
    assert_true(same);
}

#define PARTS(v, s, parse, ...)                                                \
    do {                                                                       \
        static const char *const parts_[] = {__VA_ARGS__, NULL};               \
        expect_parts((v), (s), (parse), parts_);                               \
    } while (0)

/* No control token in the ids of s with parsing off, and they decode back
 * to s. */
static void expect_as_text(const vocab *v, const char *s)
{
    size_t n;
    int32_t *ids = tokenize(v, s, strlen(s), false, false, &n);
    for (size_t i = 0; i < n; i++) {
        if (vocab_is_control(v, ids[i])) fail_msg("\"%s\" gave control token %d with parsing off", s, ids[i]);
    }
    free(ids);
    expect_round_trip(v, s, strlen(s), TOK_DETOK_STRIP_LEADING_SPACE);
}

static void test_phi3_specials(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "phi-3");
    /* <s>, <|endoftext|> and <|end|> are CONTROL: text unless parsing is
     * on. */
    assert_int_equal(vocab_token_type(v, id_of(v, "<|endoftext|>")), VOCAB_TOKEN_CONTROL);
    expect_as_text(v, "<|end|>");
    expect_as_text(v, "<s>");
    expect_as_text(v, "x<|endoftext|>y");
    EXPECT(v, "<|end|>", true, "<|end|>");
    EXPECT(v, "<s>", true, "<s>");
    /* </s> is USER_DEFINED in this file: it matches with parsing off too
     * (llama.cpp's rule, and Hugging Face's for added tokens). */
    assert_int_equal(vocab_token_type(v, id_of(v, "</s>")), VOCAB_TOKEN_USER_DEFINED);
    PARTS(v, "a</s>", false, "a", "\x01</s>");
    /* The model's name says Phi-3, so (as llama.cpp does) its special
     * tokens other than <unk>, <s> and <|endoftext|> swallow the
     * whitespace after them; the text after starts afresh with
     * SentencePiece's prefix space. */
    PARTS(v, "<|user|>  Hi<|end|>\n<|assistant|>", true, "\x01<|user|>", "Hi", "\x01<|end|>",
          "\x01<|assistant|>");
    PARTS(v, "a</s>  b", false, "a", "\x01</s>", "b");
    /* <|endoftext|> and <s> keep it: " b" gets the prefix space and its
     * own. */
    PARTS(v, "<|endoftext|> b", true, "\x01<|endoftext|>", " b");
    PARTS(v, "<s>\tb", true, "\x01<s>", "\tb");
    vocab_free(v);
}

/* --- every vocab: scripts round-trip, controls stay text ------------------ */

static const char *const k_all[] = {"llama-spm", "phi-3", "gpt-2", "mpt", "starcoder", "refact", "falcon",
                                    "deepseek-llm", "deepseek-coder", "llama-bpe", "qwen2", "qwen35",
                                    "gemma-4", "command-r", "baichuan", "gpt-neox"};

static void test_scripts_round_trip(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    for (size_t k = 0; k < sizeof(k_all) / sizeof(k_all[0]); k++) {
        vocab *v = open_vocab(k_all[k]);
        if (v == NULL) continue;
        /* SentencePiece puts a space in front; the flag takes it away. */
        unsigned flags = vocab_adds_space_prefix(v) ? TOK_DETOK_STRIP_LEADING_SPACE : 0;
        for (size_t i = 0; i < sizeof(k_scripts) / sizeof(k_scripts[0]); i++) {
            print_message("  %s, script input %zu\n", k_all[k], i);
            expect_round_trip(v, k_scripts[i], strlen(k_scripts[i]), flags);
        }
        vocab_free(v);
    }
}

/* With parsing off, no CONTROL or UNKNOWN token comes out of text that is
 * made of their texts; with parsing on, each is found as itself. */
static void test_controls_only_when_parsed(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    for (size_t k = 0; k < sizeof(k_all) / sizeof(k_all[0]); k++) {
        vocab *v = open_vocab(k_all[k]);
        if (v == NULL) continue;
        int32_t n_checked = 0;
        for (int32_t id = 0; id < vocab_n_tokens(v) && n_checked < 40; id++) {
            if (!vocab_is_control(v, id)) continue;
            size_t len;
            const char *text = vocab_token_text(v, id, &len);
            if (len == 0) continue;
            n_checked++;
            char buf[512];
            if (len + 2 > sizeof(buf)) continue;
            /* Between two letters, so nothing can attach to it by accident. */
            buf[0] = 'x';
            memcpy(buf + 1, text, len);
            buf[len + 1] = 'y';
            size_t n;
            int32_t *ids = tokenize(v, buf, len + 2, false, false, &n);
            for (size_t i = 0; i < n; i++) {
                if (vocab_is_control(v, ids[i])) {
                    fail_msg("%s: \"%.*s\" gave control token %d with parsing off", k_all[k], (int)len, text,
                             ids[i]);
                }
            }
            free(ids);
            ids = tokenize(v, buf, len + 2, false, true, &n);
            bool found = false;
            for (size_t i = 0; i < n; i++) found = found || ids[i] == id;
            /* Another special text may contain this one and win; those
             * cases are rare and are the longest-first rule at work. */
            int32_t other = -1;
            for (size_t i = 0; i < n; i++) {
                if (vocab_is_control(v, ids[i]) && ids[i] != id) other = ids[i];
            }
            if (!found && other < 0) {
                fail_msg("%s: \"%.*s\" was not found as token %d with parsing on", k_all[k], (int)len, text, id);
            }
            free(ids);
        }
        vocab_free(v);
    }
}

/* --- Qwen 3.5's pre-tokenizer ----------------------------------------------- */

static void assert_split(const vocab *v, const char *s, const char *const *words)
{
    tok_spanvec spans = {0};
    strata_err err;
    size_t len = strlen(s);
    if (tok_pretok_split(v->pretok, s, len, &spans, &err) != 0) fail_msg("%s", err.msg);
    size_t n = 0;
    while (words[n] != NULL) n++;
    bool same = spans.n == n;
    for (size_t i = 0; same && i < n; i++) {
        same = spans.s[i].len == strlen(words[i]) && memcmp(s + spans.s[i].off, words[i], spans.s[i].len) == 0;
    }
    if (!same) {
        for (size_t i = 0; i < spans.n; i++) {
            print_message("    word %zu: \"%.*s\"\n", i, (int)spans.s[i].len, s + spans.s[i].off);
        }
    }
    tok_spanvec_free(&spans);
    assert_true(same);
}

#define SPLIT(v, s, ...)                                                       \
    do {                                                                       \
        static const char *const words_[] = {__VA_ARGS__, NULL};               \
        assert_split((v), (s), words_);                                        \
    } while (0)

static void test_qwen35_marks_join_letters(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "qwen35");
    assert_string_equal(vocab_pretok_name(v), "qwen35");
    /* Combining marks continue a letter run (Qwen2 cuts them off as
     * punctuation); digits stay one by one; contractions split off. */
    SPLIT(v, "Vie\xcc\xa3\xcc\x82t Nam 123", "Vie\xcc\xa3\xcc\x82t", " Nam", " ", "1", "2", "3");
    SPLIT(v, "I'M here", "I", "'M", " here");
    /* A mark after a space: the space may lead a letter run of marks. */
    SPLIT(v, "a \xcc\x81", "a", " \xcc\x81");
    /* Long s is no "s" for the contractions (no Unicode case folding). */
    SPLIT(v, "x'\xc5\xbft", "x", "'\xc5\xbft");
    vocab_free(v);

    OPEN(v, "qwen2");
    SPLIT(v, "Vie\xcc\xa3\xcc\x82t", "Vie", "\xcc\xa3\xcc\x82", "t");
    SPLIT(v, "x'\xc5\xbft X'S", "x", "'\xc5\xbft", " X", "'S");
    vocab_free(v);

    /* Llama 3: the same contractions, digits in threes. */
    OPEN(v, "llama-bpe");
    SPLIT(v, "x'\xc5\xbft WE'LL 12345", "x", "'\xc5\xbft", " WE", "'LL", " ", "123", "45");
    vocab_free(v);
}

/* GPT-NeoX's file names no pre-tokenizer: GPT-2's pattern, the one its
 * model was made with (Hugging Face's ByteLevel default). */
static void test_missing_pretokenizer(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "gpt-neox");
    assert_string_equal(vocab_pretok_name(v), "gpt-2");
    SPLIT(v, "Hello, world!!! 12345", "Hello", ",", " world", "!!!", " 12345");
    vocab_free(v);
}

/* --- Gemma 4 ----------------------------------------------------------------- */

static void test_gemma4_rules(void **state)
{
    (void)state;
    vocab *v;
    OPEN(v, "gemma-4");
    assert_string_equal(vocab_pretok_name(v), "gemma4");
    /* BOS is added. */
    size_t n;
    int32_t *ids = tokenize(v, "hi", 2, true, false, &n);
    assert_true(n >= 2);
    assert_int_equal(ids[0], vocab_specials(v)->bos);
    free(ids);
    /* A run of newlines that is a token is that token. */
    EXPECT(v, "\n\n\n", false, "\n\n\n");
    EXPECT(v, "a\n\nb", false, "a", "\n\n", "b");
    /* Spaces are "▁"; a lone space is the token "▁". */
    EXPECT(v, " ", false, "\xe2\x96\x81");
    /* A character that is no token (U+20000, CJK Extension B) becomes the
     * <0xNN> tokens of its UTF-8 bytes. */
    assert_int_equal(vocab_find(v, "\xf0\xa0\x80\x80", 4), -1);
    EXPECT(v, "\xf0\xa0\x80\x80", false, "<0xF0>", "<0xA0>", "<0x80>", "<0x80>");
    /* Bytes that are not UTF-8 come out as their byte tokens too. */
    EXPECT(v, "\xff", false, "<0xFF>");
    expect_round_trip(v, "x\xff\xc3y \xf0\xa0\x80\x80\n", 10, 0);
    /* Control tokens only when parsing; user-defined ones always. */
    EXPECT(v, "<|turn>", true, "<|turn>");
    ids = tokenize(v, "<|turn>", 7, false, false, &n);
    for (size_t i = 0; i < n; i++) assert_false(vocab_is_control(v, ids[i]));
    free(ids);
    EXPECT(v, "<|tool_call>", false, "<|tool_call>");
    /* A turn ends generation with <turn|> as well as <eos>. */
    assert_true(vocab_is_eog(v, id_of(v, "<turn|>")));
    assert_true(vocab_is_eog(v, id_of(v, "<eos>")));
    assert_false(vocab_is_eog(v, id_of(v, "<|turn>")));
    /* Pieces give spaces back. */
    char piece[64];
    size_t n_piece;
    strata_err err;
    assert_int_equal(tok_token_to_piece(v, id_of(v, "\xe2\x96\x81hello"), false, piece, sizeof(piece), &n_piece,
                                        &err), 0);
    assert_int_equal(n_piece, 6);
    assert_memory_equal(piece, " hello", 6);
    vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_accents_and_case),
        cmocka_unit_test(test_bert_hangul_and_cjk),
        cmocka_unit_test(test_bert_controls_and_spaces),
        cmocka_unit_test(test_bert_specials),
        cmocka_unit_test(test_phi3_specials),
        cmocka_unit_test(test_scripts_round_trip),
        cmocka_unit_test(test_controls_only_when_parsed),
        cmocka_unit_test(test_qwen35_marks_join_letters),
        cmocka_unit_test(test_missing_pretokenizer),
        cmocka_unit_test(test_gemma4_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
