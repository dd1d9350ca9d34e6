/* Vocab loading and the tokenizer API around the algorithms: small
 * hand-made vocabs (written with gguf_writer into memory) whose results
 * can be worked out by hand — merge order and tie-breaks, byte fallback,
 * special-token cutting — hostile metadata that must be refused with a
 * message naming the key, and the API's contracts on real vocabs (room too
 * small, BOS/EOS, parse_special, end-of-generation ids). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/rng.h"
#include "gguf/gguf_write.h"
#include "testdata.h"
#include "text/tokenizer.h"
#include "text/vocab_internal.h" /* to switch off SentencePiece's word cuts */
#include "vocab_testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- building vocabs in memory --------------------------------------------- */

typedef struct vspec {
    const char *model;            /* NULL: no tokenizer.ggml.model */
    const char *const *tokens;    /* NULL: no tokens key */
    size_t n_tokens;
    const float *scores;          /* may be NULL */
    const int32_t *types;         /* may be NULL */
    const char *const *merges;    /* may be NULL */
    size_t n_merges;
    void (*extra)(gguf_writer *w); /* more keys, or NULL */
} vspec;

/* Writes the spec as a GGUF in memory and loads a vocab from it. */
static int load_spec(const vspec *s, vocab **v, strata_err *err)
{
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    if (s->model) assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.model", s->model, NULL), 0);
    if (s->tokens) {
        assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", s->n_tokens, s->tokens, NULL), 0);
    }
    if (s->scores) {
        assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, s->n_tokens,
                                             s->scores, NULL), 0);
    }
    if (s->types) {
        assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, s->n_tokens,
                                             s->types, NULL), 0);
    }
    if (s->merges) {
        assert_int_equal(gguf_writer_add_str_arr(w, "tokenizer.ggml.merges", s->n_merges, s->merges, NULL), 0);
    }
    if (s->extra) s->extra(w);
    return tu_vocab_from_writer(w, v, err);
}

static size_t tokenize(const vocab *v, const char *s, bool add_special, bool parse_special, int32_t *ids,
                       size_t cap)
{
    size_t n;
    strata_err err;
    if (tok_tokenize(v, s, strlen(s), add_special, parse_special, ids, cap, &n, &err) != 0) {
        fail_msg("tokenize \"%s\": %s", s, err.msg);
    }
    return n;
}

static void assert_ids(const int32_t *got, size_t n_got, const int32_t *want, size_t n_want)
{
    bool same = n_got == n_want && (n_got == 0 || memcmp(got, want, n_got * sizeof(*got)) == 0);
    if (!same) {
        char g[256] = "", e[256] = "";
        for (size_t i = 0; i < n_got && strlen(g) < 200; i++) snprintf(g + strlen(g), 256 - strlen(g), " %d", got[i]);
        for (size_t i = 0; i < n_want && strlen(e) < 200; i++) snprintf(e + strlen(e), 256 - strlen(e), " %d", want[i]);
        fail_msg("ids differ: got [%s ] want [%s ]", g, e);
    }
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* --- SentencePiece by hand ------------------------------------------------- */

#define U "\xe2\x96\x81" /* ▁ */

static const char *const k_spm_tokens[] = {
    "<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", /* 0-4 */
    U, "a", "b", "c", U "a",                    /* 5-9 */
    "ab", "bc", "abc", "aa", "<ctl>",           /* 10-14 */
};
static const float k_spm_scores[] = {0, 0, 0, 0, 0, -1, -1, -1, -1, -5, -3, -2, -4, -2, 0};
static const int32_t k_spm_types[] = {2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3};

static vocab *spm_vocab(void (*extra)(gguf_writer *))
{
    vspec s = {"llama", k_spm_tokens, 15, k_spm_scores, k_spm_types, NULL, 0, extra};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    return v;
}

static void no_space_prefix(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false, NULL), 0);
}

/* Highest score merges first: in "abc", "bc" (-2) beats "ab" (-3), so the
 * result is a + bc, and "abc" (-4) is then reached from a + bc. */
static void test_spm_merge_order(void **state)
{
    (void)state;
    vocab *v = spm_vocab(no_space_prefix);
    int32_t ids[16];
    size_t n = tokenize(v, "abc", false, false, ids, 16);
    assert_ids(ids, n, IDS(12)); /* a + bc -> abc */
    n = tokenize(v, "abca", false, false, ids, 16);
    assert_ids(ids, n, IDS(12, 6));
    /* Equal scores: the leftmost pair first, "aa" + "a". */
    n = tokenize(v, "aaa", false, false, ids, 16);
    assert_ids(ids, n, IDS(13, 6));
    /* "é" is no token: its two UTF-8 bytes as <0xC3> <0xA9>. A character
     * without byte pieces (ü is C3 BC) becomes UNK. */
    n = tokenize(v, "\xc3\xa9", false, false, ids, 16);
    assert_ids(ids, n, IDS(3, 4));
    n = tokenize(v, "\xc3\xbc", false, false, ids, 16);
    assert_ids(ids, n, IDS(0));
    /* The text of a control token is never merged into: "<ctl>" stays text
     * without parse_special ('<', 'c', 't', 'l', '>' are no tokens: UNK,
     * but "c" is). */
    n = tokenize(v, "<ctl>", false, false, ids, 16);
    assert_ids(ids, n, IDS(0, 8, 0, 0, 0));
    n = tokenize(v, "<ctl>", false, true, ids, 16);
    assert_ids(ids, n, IDS(14));
    vocab_free(v);
}

/* The space prefix: a "▁" in front of the text and after each special
 * token; BOS by default. */
static void test_spm_space_prefix(void **state)
{
    (void)state;
    vocab *v = spm_vocab(NULL);
    assert_true(vocab_adds_bos(v));
    assert_false(vocab_adds_eos(v));
    assert_true(vocab_adds_space_prefix(v));
    int32_t ids[16];
    size_t n = tokenize(v, "a", true, false, ids, 16);
    assert_ids(ids, n, IDS(1, 9)); /* <s> ▁a */
    n = tokenize(v, "a<ctl>a", false, true, ids, 16);
    assert_ids(ids, n, IDS(9, 14, 9));
    n = tokenize(v, "", true, false, ids, 16);
    assert_ids(ids, n, IDS(1)); /* empty text: BOS only, no "▁" */
    n = tokenize(v, "", false, false, ids, 16);
    assert_int_equal(n, 0);
    vocab_free(v);
}

/* --- byte-level BPE by hand -------------------------------------------------- */

/* Tokens are GPT-2 mapped characters: "Ġ" is the space. */
#define G "\xc4\xa0"
static const char *const k_bpe_tokens[] = {
    "a", "b", "c", G, "ab", "bc", "abc", G "a", "<|end|>", "xyz",
};
static const int32_t k_bpe_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 3, 4};
static const char *const k_bpe_merges[] = {"b c", "a b", "a bc", G " a"};

static void bpe_pre(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.pre", "no-such-family", NULL), 0);
}

static void test_bpe_merge_rank(void **state)
{
    (void)state;
    vspec s = {"gpt2", k_bpe_tokens, 10, NULL, k_bpe_types, k_bpe_merges, 4, bpe_pre};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    /* An unknown pre-tokenizer falls back to GPT-2's. */
    assert_string_equal(vocab_pretok_name(v), "gpt-2");
    assert_string_equal(vocab_pre_name(v), "no-such-family");
    int32_t ids[16];
    /* Rank 0 "b c" first, then rank 2 "a bc": abc. */
    size_t n = tokenize(v, "abc", false, false, ids, 16);
    assert_ids(ids, n, IDS(6));
    /* "ab" alone: rank 1. The pre-tokenizer keeps " a" together. */
    n = tokenize(v, "ab a", false, false, ids, 16);
    assert_ids(ids, n, IDS(4, 7));
    /* A byte whose mapped character is no token, without UNK: dropped. */
    n = tokenize(v, "d", false, false, ids, 16);
    assert_int_equal(n, 0);
    /* User-defined text is cut out even without parse_special; control
     * text only with it. */
    n = tokenize(v, "axyzb", false, false, ids, 16);
    assert_ids(ids, n, IDS(0, 9, 1));
    n = tokenize(v, "a<|end|>", false, true, ids, 16);
    assert_ids(ids, n, IDS(0, 8));
    n = tokenize(v, "<|end|>b", false, false, ids, 16);
    assert_ids(ids, n, IDS(1)); /* its characters are no tokens here: dropped */
    /* BPE adds no BOS unless the family or the file says so. */
    assert_false(vocab_adds_bos(v));
    assert_true(vocab_is_eog(v, 8)); /* <|end|> by its text */
    vocab_free(v);
}

static void llama3_pre_with_bos(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.pre", "llama-bpe", NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 8, NULL), 0);
}

static void llama3_pre_no_bos(gguf_writer *w)
{
    llama3_pre_with_bos(w);
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false, NULL), 0);
}

static void test_bpe_family_defaults(void **state)
{
    (void)state;
    vspec s = {"gpt2", k_bpe_tokens, 10, NULL, k_bpe_types, k_bpe_merges, 4, llama3_pre_with_bos};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_string_equal(vocab_pretok_name(v), "llama3");
    assert_true(vocab_adds_bos(v)); /* Llama 3 adds BOS */
    int32_t ids[16];
    size_t n = tokenize(v, "abc", true, false, ids, 16);
    assert_ids(ids, n, IDS(8, 6));
    vocab_free(v);
    s.extra = llama3_pre_no_bos;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_false(vocab_adds_bos(v)); /* the file's key wins */
    vocab_free(v);
}

/* --- Gemma 4's character BPE by hand ----------------------------------------- */

static const char *const k_g4_tokens[] = {
    "<pad>", "<eos>", "<bos>", U, "a", "b", U "a", "ab", /* 0-7 */
    "\n", "\n\n", "a\n", "<0xC3>", "<0xA9>", "<|turn>", "<|tool>", /* 8-14 */
};
static const int32_t k_g4_types[] = {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 3, 4};
/* "a \n" would make "a\n" if a newline could meet a letter in one word. */
static const char *const k_g4_merges[] = {"a b", U " a", "a \n"};

static void g4_keys(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2, NULL), 0);
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1, NULL), 0);
    /* llama.cpp adds BOS for Gemma 4 even when the file says not to. */
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false, NULL), 0);
}

static void test_gemma4_by_hand(void **state)
{
    (void)state;
    vspec s = {"gemma4", k_g4_tokens, 15, NULL, k_g4_types, k_g4_merges, 3, g4_keys};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_get_kind(v), VOCAB_KIND_BPE);
    assert_string_equal(vocab_pretok_name(v), "gemma4");
    assert_true(vocab_adds_bos(v));
    int32_t ids[16];
    /* The space is "▁": a b ▁ a -> ab (rank 0), ▁a (rank 1). */
    size_t n = tokenize(v, "ab a", true, false, ids, 16);
    assert_ids(ids, n, IDS(2, 7, 6));
    /* Newlines are words of their own: "a\n" never forms; "\n\n" is a
     * token and taken whole; three newlines are no token and no merge
     * joins them, so one by one. */
    n = tokenize(v, "a\n\nb", false, false, ids, 16);
    assert_ids(ids, n, IDS(4, 9, 5));
    n = tokenize(v, "a\n", false, false, ids, 16);
    assert_ids(ids, n, IDS(4, 8));
    n = tokenize(v, "\n\n\n", false, false, ids, 16);
    assert_ids(ids, n, IDS(8, 8, 8));
    /* A character that is no token: its bytes' <0xNN> tokens, a byte
     * without one dropped (ü is C3 BC). */
    n = tokenize(v, "\xc3\xa9", false, false, ids, 16);
    assert_ids(ids, n, IDS(11, 12));
    n = tokenize(v, "\xc3\xbc", false, false, ids, 16);
    assert_ids(ids, n, IDS(11));
    /* Control text only when parsed, user-defined always; no space prefix
     * after a special token. */
    n = tokenize(v, "<|turn>a", false, true, ids, 16);
    assert_ids(ids, n, IDS(13, 4));
    n = tokenize(v, "<|tool>a", false, false, ids, 16);
    assert_ids(ids, n, IDS(14, 4));
    /* Pieces: "▁" is a space again, <0xNN> its byte. */
    char out[32];
    size_t n_out;
    n = tokenize(v, "ab a \xc3\xa9", false, false, ids, 16);
    assert_int_equal(tok_detokenize(v, ids, n, 0, out, sizeof(out), &n_out, &err), 0);
    assert_int_equal(n_out, 7);
    assert_memory_equal(out, "ab a \xc3\xa9", 7);
    vocab_free(v);
}

/* --- token types and attributes set by name --------------------------------- */

static const char *const k_named_tokens[] = {
    "a", "b", G, "<|im_end|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>", "<mask>", /* 0-8 */
};
static const int32_t k_named_types[] = {1, 1, 1, 4, 3, 3, 3, 3, 3};
static const char *const k_named_merges[] = {"a b"};

static void jina_pre(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.pre", "jina-v2-code", NULL), 0);
}

/* llama.cpp overrides some types by text: an end-of-turn name is a control
 * token whatever the file says, gpt-oss's channel markers are always text,
 * and with <|return|> and <|call|> present <|end|> ends no generation. */
static void test_types_by_text(void **state)
{
    (void)state;
    vspec s = {"gpt2", k_named_tokens, 9, NULL, k_named_types, k_named_merges, 1, NULL};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_token_type(v, 3), VOCAB_TOKEN_CONTROL);
    assert_int_equal(vocab_token_type(v, 4), VOCAB_TOKEN_USER_DEFINED);
    int32_t ids[16];
    size_t n = tokenize(v, "<|im_end|>", false, false, ids, 16);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] != 3);
    n = tokenize(v, "a<|im_end|>", false, true, ids, 16);
    assert_ids(ids, n, IDS(0, 3));
    n = tokenize(v, "a<|channel|>b", false, false, ids, 16);
    assert_ids(ids, n, IDS(0, 4, 1));
    assert_true(vocab_is_eog(v, 3));
    assert_true(vocab_is_eog(v, 6));
    assert_true(vocab_is_eog(v, 7));
    assert_false(vocab_is_eog(v, 5));
    assert_int_equal(vocab_token_type(v, 5), VOCAB_TOKEN_USER_DEFINED);
    /* <mask> takes no space here... */
    n = tokenize(v, "a <mask>", false, true, ids, 16);
    assert_ids(ids, n, IDS(0, 2, 8));
    vocab_free(v);
    /* ...but with Jina v2's pre-tokenizer it takes the space before it. */
    s.extra = jina_pre;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    n = tokenize(v, "a <mask> b", false, true, ids, 16);
    assert_ids(ids, n, IDS(0, 8, 2, 1));
    vocab_free(v);
}

static void phi3_name(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "general.name", "Tiny-PHI3-by-hand", NULL), 0);
}

/* A model named Phi-3: control and user-defined tokens other than <unk>,
 * <s> and <|endoftext|> take the whitespace after them. */
static void test_phi3_name_strips(void **state)
{
    (void)state;
    vocab *v = spm_vocab(NULL);
    int32_t ids[16];
    /* Without the name: "  a" after <ctl> is ▁ + ▁ + ▁a. */
    size_t n = tokenize(v, "a<ctl>  a", false, true, ids, 16);
    assert_ids(ids, n, IDS(9, 14, 5, 5, 9));
    vocab_free(v);
    v = spm_vocab(phi3_name);
    n = tokenize(v, "a<ctl> \t\n a", false, true, ids, 16);
    assert_ids(ids, n, IDS(9, 14, 9));
    /* <s> keeps its whitespace. */
    n = tokenize(v, "<s> a", false, true, ids, 16);
    assert_ids(ids, n, IDS(1, 5, 9));
    vocab_free(v);
}

/* --- WordPiece's normalizer options ---------------------------------------- */

/* llama.cpp's convention: word starts carry "▁". No capital letters, so
 * without keys the vocab is taken to be uncased. */
static const char *const k_wpm_tokens[] = {
    "[UNK]", "[CLS]", "[SEP]", U "ab", U "e", U "\xc3\xa9", U "\xe1\x84\x8b", "\xe1\x85\xa1", /* 0-7 */
    U "AB", "\xe1\x86\xab", /* 8-9 */
};
static const int32_t k_wpm_types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};

static void wpm_keep_case(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.normalizer.lowercase", false, NULL), 0);
}

static void wpm_lower_keep_accents(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.normalizer.lowercase", true, NULL), 0);
    assert_int_equal(gguf_writer_add_bool(w, "tokenizer.ggml.normalizer.strip_accents", false, NULL), 0);
}

static void test_wpm_normalizer_keys(void **state)
{
    (void)state;
    /* Token 8 has capitals: list only 0-7 for the "uncased" vocab. */
    vspec s = {"bert", k_wpm_tokens, 8, NULL, k_wpm_types, NULL, 0, NULL};
    vocab *v;
    strata_err err;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    int32_t ids[16];
    /* Uncased: lowercase, é -> e, 안 -> its leading jamo alone. */
    size_t n = tokenize(v, "AB \xc3\xa9 \xec\x95\x88", false, false, ids, 16);
    assert_ids(ids, n, IDS(3, 4, 6));
    vocab_free(v);
    /* lowercase false (strip_accents follows): AB stays, é stays, 안 stays
     * one syllable (no token: UNK). */
    s.n_tokens = 10;
    s.extra = wpm_keep_case;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    n = tokenize(v, "AB \xc3\xa9 \xec\x95\x88", false, false, ids, 16);
    assert_ids(ids, n, IDS(8, 5, 0));
    vocab_free(v);
    s.extra = wpm_lower_keep_accents;
    if (load_spec(&s, &v, &err) != 0) fail_msg("%s", err.msg);
    n = tokenize(v, "AB \xc3\xa9", false, false, ids, 16);
    assert_ids(ids, n, IDS(3, 5));
    vocab_free(v);
}

/* --- pre-tokenizers by name -------------------------------------------------- */

static const char *g_pre_name;

static void named_pre(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.pre", g_pre_name, NULL), 0);
}

/* The words pre-tokenizer `pre` cuts s into, joined with '|'. */
static void assert_words(const char *pre, const char *s, const char *want)
{
    g_pre_name = pre;
    vspec spec = {"gpt2", k_bpe_tokens, 10, NULL, k_bpe_types, k_bpe_merges, 4, named_pre};
    vocab *v;
    strata_err err;
    if (load_spec(&spec, &v, &err) != 0) fail_msg("%s", err.msg);
    tok_spanvec spans = {0};
    if (tok_pretok_split(v->pretok, s, strlen(s), &spans, &err) != 0) fail_msg("%s", err.msg);
    char got[512] = "";
    for (size_t i = 0; i < spans.n; i++) {
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%.*s", i ? "|" : "", (int)spans.s[i].len,
                 s + spans.s[i].off);
    }
    tok_spanvec_free(&spans);
    vocab_free(v);
    if (strcmp(got, want) != 0) fail_msg("%s: \"%s\" split as \"%s\", want \"%s\"", pre, s, got, want);
}

static void test_pretokenizers_by_name(void **state)
{
    (void)state;
    /* llama.cpp's "default": punctuation and ASCII symbol runs, GPT-2's
     * words, digit runs, then groups of three from the left. */
    assert_words("default", "Hello, world!!! 12345+6", "Hello|,| world|!!!| |123|45|+|6");
    /* Qwen2's family (grok-2, hunyuan): digits alone. */
    assert_words("grok-2", "ab 12", "ab| |1|2");
    /* Seed-Coder: a punctuation run does not take the newlines after it. */
    assert_words("seed-coder", "a.\n\nb", "a|.|\n\n|b");
    assert_words("qwen2", "a.\n\nb", "a|.\n\n|b");
    /* o200k keeps Unicode's case classes (llama.cpp would give
     * "écoleÉ|COLE"): a lowercase run, then an uppercase one. */
    assert_words("gpt-4o", "\xc3\xa9" "cole\xc3\x89" "COLE", "\xc3\xa9" "cole|\xc3\x89" "COLE");
    /* BailingMoE: as Qwen2, a whitespace run up to its last newline. */
    assert_words("bailingmoe2", "a \n\n \n b", "a| \n\n \n| b");
}

/* --- hostile metadata ------------------------------------------------------ */

static void assert_refused(const vspec *s, int code, const char *needle)
{
    vocab *v = NULL;
    strata_err err;
    strata_err_clear(&err);
    int rc = load_spec(s, &v, &err);
    if (rc != code) fail_msg("expected code %d, got %d (%s)", code, rc, err.msg);
    assert_null(v);
    if (strstr(err.msg, needle) == NULL) fail_msg("message '%s' does not mention '%s'", err.msg, needle);
}

static void bos_out_of_range(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 15, NULL), 0);
}

static void bos_none(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 4294967295u, NULL), 0);
}

static void eos_wrong_type(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_str(w, "tokenizer.ggml.eos_token_id", "2", NULL), 0);
}

static void tokens_as_ints(gguf_writer *w)
{
    int32_t x[3] = {1, 2, 3};
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.tokens", GGUF_VTYPE_INT32, 3, x, NULL), 0);
}

static void short_scores(gguf_writer *w)
{
    assert_int_equal(gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, 3, k_spm_scores, NULL), 0);
}

static void test_hostile_metadata(void **state)
{
    (void)state;
    vspec s = {"llama", k_spm_tokens, 15, k_spm_scores, k_spm_types, NULL, 0, NULL};

    vspec t = s;
    t.model = NULL;
    assert_refused(&t, STRATA_ENOTFOUND, "tokenizer.ggml.model");
    t = s;
    t.model = "t5";
    assert_refused(&t, STRATA_EUNSUPPORTED, "'t5'");
    t = s;
    t.tokens = NULL;
    t.scores = NULL;
    t.types = NULL;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.tokens is missing");
    t.extra = tokens_as_ints;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.tokens: array of int32");
    t = s;
    t.scores = NULL;
    t.extra = short_scores;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.scores: 3 elements for 15 tokens");
    t = s;
    int32_t bad_types[15];
    memcpy(bad_types, k_spm_types, sizeof(bad_types));
    bad_types[7] = 9;
    t.types = bad_types;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.token_type[7] = 9");
    t = s;
    float nan_scores[15];
    memcpy(nan_scores, k_spm_scores, sizeof(nan_scores));
    nan_scores[4] = NAN;
    t.scores = nan_scores;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.scores[4] is NaN");
    t = s;
    t.extra = bos_out_of_range;
    assert_refused(&t, STRATA_EFORMAT, "bos_token_id = 15 is not a token id");
    t.extra = eos_wrong_type;
    assert_refused(&t, STRATA_EFORMAT, "tokenizer.ggml.eos_token_id");
    t = s;
    t.n_tokens = 0;
    t.scores = NULL;
    t.types = NULL;
    assert_refused(&t, STRATA_EFORMAT, "0 tokens");

    vspec b = {"gpt2", k_bpe_tokens, 10, NULL, k_bpe_types, NULL, 0, NULL};
    assert_refused(&b, STRATA_EFORMAT, "tokenizer.ggml.merges is missing");
    static const char *const bad_merges[] = {"a b", "abc"};
    b.merges = bad_merges;
    b.n_merges = 2;
    assert_refused(&b, STRATA_EFORMAT, "tokenizer.ggml.merges[1]");

    /* UINT32_MAX means "none": accepted, and then no BOS is added. */
    t = s;
    t.extra = bos_none;
    vocab *v;
    strata_err err;
    if (load_spec(&t, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_specials(v)->bos, -1);
    assert_false(vocab_adds_bos(v));
    vocab_free(v);

    /* "none": a vocab with nothing to tokenize with. */
    t = s;
    t.model = "none";
    if (load_spec(&t, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_int_equal(vocab_get_kind(v), VOCAB_KIND_NONE);
    size_t n;
    assert_int_equal(tok_tokenize(v, "a", 1, false, false, NULL, 0, &n, &err), STRATA_EUNSUPPORTED);
    vocab_free(v);
}

/* --- real vocabs ----------------------------------------------------------- */

static vocab *open_real(const char *rel)
{
    char path[4096];
    if (testdata_path(path, sizeof(path), rel) == NULL) return NULL;
    vocab *v;
    strata_err err;
    if (vocab_open(&v, path, &err) != 0) fail_msg("%s", err.msg);
    return v;
}

static void test_room_too_small(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_real("tokenizer/ggml-vocab-llama-spm.gguf");
    int32_t ids[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    size_t n;
    strata_err err;
    assert_int_equal(tok_tokenize(v, "Hello world", 11, true, false, ids, 2, &n, &err), STRATA_ERANGE);
    assert_int_equal(n, 3); /* <s> ▁Hello ▁world */
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 15043);
    assert_int_equal(ids[2], -7); /* nothing past the room */
    assert_non_null(strstr(err.msg, "3"));
    assert_int_equal(tok_tokenize(v, "Hello world", 11, true, false, NULL, 0, &n, &err), STRATA_ERANGE);
    assert_int_equal(n, 3);
    assert_int_equal(tok_tokenize(v, "Hello world", 11, true, false, ids, 3, &n, &err), 0);
    assert_ids(ids, n, IDS(1, 15043, 3186));
    vocab_free(v);
}

/* "<s>" and "</s>" are control tokens: ids only with parse_special; the
 * space prefix comes back after each. */
static void test_parse_special(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_real("tokenizer/ggml-vocab-llama-spm.gguf");
    int32_t ids[32];
    size_t n = tokenize(v, "<s>Hello</s>", false, true, ids, 32);
    assert_ids(ids, n, IDS(1, 15043, 2));
    n = tokenize(v, "<s>Hello</s>", false, false, ids, 32);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] != 1 && ids[i] != 2);
    assert_true(n > 3);
    vocab_free(v);

    /* WordPiece: [CLS] text [SEP] with add_special; "[MASK]" parsed. */
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    v = open_real("tokenizer/ggml-vocab-bert-bge.gguf");
    n = tokenize(v, "Hello [MASK] world", true, true, ids, 32);
    assert_ids(ids, n, IDS(101, 7592, 103, 2088, 102));
    n = tokenize(v, "Hello [MASK] world", false, false, ids, 32);
    assert_true(n > 3 && ids[1] != 103); /* "[", "mask", "]" */
    vocab_free(v);
}

/* MPT's user-defined whitespace tokens (2..24 spaces) are cut before BPE,
 * longest first: 30 spaces are 24 + 6. */
static void test_user_defined_longest_first(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-mpt.gguf");
    vocab *v = open_real("tokenizer/ggml-vocab-mpt.gguf");
    char text[64];
    memset(text, ' ', 30);
    memcpy(text + 30, "x", 2);
    int32_t ids[16];
    size_t n = tokenize(v, text, false, false, ids, 16);
    char spaces[32];
    memset(spaces, ' ', sizeof(spaces));
    int32_t s24 = vocab_find(v, spaces, 24), s6 = vocab_find(v, spaces, 6);
    assert_int_equal(vocab_token_type(v, s24), VOCAB_TOKEN_USER_DEFINED);
    assert_true(n == 3);
    assert_int_equal(ids[0], s24);
    assert_int_equal(ids[1], s6);
    vocab_free(v);
}

static void test_special_ids_and_eog(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-phi-3.gguf");
    vocab *v = open_real("tokenizer/ggml-vocab-phi-3.gguf");
    const vocab_special *sp = vocab_specials(v);
    assert_int_equal(sp->bos, 1);
    assert_int_equal(sp->eos, 32000);
    assert_int_equal(sp->unk, 0);
    assert_true(vocab_is_eog(v, 32000));
    assert_true(vocab_is_eog(v, 32007)); /* <|end|>, found by its text */
    assert_false(vocab_is_eog(v, 1));
    assert_false(vocab_is_eog(v, -1));
    assert_false(vocab_is_eog(v, 1 << 30));
    vocab_free(v);

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-bert-bge.gguf");
    v = open_real("tokenizer/ggml-vocab-bert-bge.gguf");
    sp = vocab_specials(v);
    assert_int_equal(sp->cls, 101);
    assert_int_equal(sp->sep, 102); /* from "seperator_token_id" */
    assert_int_equal(sp->mask, 103);
    assert_int_equal(sp->unk, 100);
    assert_int_equal(vocab_get_kind(v), VOCAB_KIND_WPM);
    vocab_free(v);

    TESTDATA_FILE(path, "tokenizer/ggml-vocab-gpt-2.gguf");
    v = open_real("tokenizer/ggml-vocab-gpt-2.gguf");
    assert_true(vocab_is_eog(v, 50256));
    assert_false(vocab_adds_bos(v));
    assert_string_equal(vocab_kind_name(vocab_get_kind(v)), "gpt2");
    vocab_free(v);
}

/* Hostile text: long runs that make naive regexes or merges quadratic, and
 * NUL bytes; all must tokenize (and quickly: this test would time out). */
static void test_hostile_text(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    const char *names[] = {"deepseek-llm", "llama-spm", "gpt-2", "bert-bge", "falcon", "qwen35", "gemma-4"};
    size_t n_text = 200000;
    char *text = malloc(n_text);
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", names[k]);
        vocab *v = open_real(rel);
        for (int pattern = 0; pattern < 4; pattern++) {
            for (size_t i = 0; i < n_text; i++) {
                text[i] = pattern == 0 ? ' ' : pattern == 1 ? 'a' : pattern == 2 ? (i % 2 ? ' ' : '\n') : '\0';
            }
            text[n_text - 1] = 'x'; /* so the space run is not at the end */
            int32_t *ids;
            size_t n;
            strata_err err;
            if (tok_tokenize_alloc(v, text, n_text, true, true, &ids, &n, &err) != 0) {
                fail_msg("%s pattern %d: %s", names[k], pattern, err.msg);
            }
            assert_true(n > 0);
            free(ids);
        }
        vocab_free(v);
    }
    free(text);
}

/* ~300 KB of random words, spaces, newlines, digits and multi-byte
 * characters. */
static char *random_text(uint64_t seed, size_t n, size_t *len)
{
    static const char *parts[] = {"the", "Hello", " ", "  ", "\n", "\t", "3", "1234", ",", ".", "'s",
                                  "\xc3\xa9", "\xe6\x88\x91", "\xf0\x9f\xa6\x99", "\xe2\x96\x81",
                                  "world", "tokenization", "<s>", "\xff"};
    strata_rng rng;
    strata_rng_seed(&rng, seed);
    char *t = malloc(n + 32);
    size_t k = 0;
    while (k < n) {
        const char *p = parts[strata_rng_next(&rng) % (sizeof(parts) / sizeof(parts[0]))];
        memcpy(t + k, p, strlen(p));
        k += strlen(p);
    }
    *len = k;
    return t;
}

/* SentencePiece merges word by word when the vocab allows it (no token
 * with "▁" after another character); that must give exactly what merging
 * the whole text at once gives. */
static void test_spm_word_cuts_change_nothing(void **state)
{
    (void)state;
    char path[4096];
    TESTDATA_FILE(path, "tokenizer/ggml-vocab-llama-spm.gguf");
    vocab *v = open_real("tokenizer/ggml-vocab-llama-spm.gguf");
    assert_true(v->spm_word_cuts);
    size_t len;
    char *text = random_text(7, 300000, &len);
    int32_t *cut, *whole;
    size_t n_cut, n_whole;
    strata_err err;
    assert_int_equal(tok_tokenize_alloc(v, text, len, true, true, &cut, &n_cut, &err), 0);
    v->spm_word_cuts = false;
    assert_int_equal(tok_tokenize_alloc(v, text, len, true, true, &whole, &n_whole, &err), 0);
    assert_int_equal(n_cut, n_whole);
    assert_memory_equal(cut, whole, n_cut * sizeof(*cut));
    free(cut);
    free(whole);
    free(text);
    vocab_free(v);

    /* A vocab with a token that spans a word start cannot be cut: "a▁b"
     * must still be found. */
    static const char *const toks[] = {"<unk>", "<s>", "</s>", U, "a", "b", "a" U, "a" U "b"};
    static const float scores[] = {0, 0, 0, -1, -1, -1, -2, -3};
    vspec sp = {"llama", toks, 8, scores, NULL, NULL, 0, no_space_prefix};
    if (load_spec(&sp, &v, &err) != 0) fail_msg("%s", err.msg);
    assert_false(v->spm_word_cuts);
    int32_t ids[8];
    size_t n = tokenize(v, "a b", false, false, ids, 8);
    assert_ids(ids, n, IDS(7));
    vocab_free(v);
}

/* One vocab shared by several threads tokenizing at once gives each the
 * same ids as tokenizing alone. */
typedef struct thread_job {
    const vocab *v;
    const char *text;
    size_t len;
    const int32_t *want;
    size_t n_want;
    int ok;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->ok = 1;
    for (int r = 0; r < 3; r++) {
        int32_t *ids;
        size_t n;
        strata_err err;
        if (tok_tokenize_alloc(j->v, j->text, j->len, true, true, &ids, &n, &err) != 0) {
            j->ok = 0;
            return NULL;
        }
        if (n != j->n_want || memcmp(ids, j->want, n * sizeof(*ids)) != 0) j->ok = 0;
        free(ids);
    }
    return NULL;
}

static void test_threads_share_a_vocab(void **state)
{
    (void)state;
    TESTDATA_REQUIRE();
    const char *names[] = {"gpt-2", "llama-spm", "bert-bge", "deepseek-llm"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "tokenizer/ggml-vocab-%s.gguf", names[k]);
        vocab *v = open_real(rel);
        thread_job jobs[4];
        char *texts[4];
        int32_t *wants[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            size_t len;
            texts[i] = random_text(100 + (uint64_t)i, 40000, &len);
            size_t n;
            strata_err err;
            assert_int_equal(tok_tokenize_alloc(v, texts[i], len, true, true, &wants[i], &n, &err), 0);
            jobs[i] = (thread_job){v, texts[i], len, wants[i], n, 0};
        }
        for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            if (!jobs[i].ok) fail_msg("%s: thread %d got other ids", names[k], i);
            free(texts[i]);
            free(wants[i]);
        }
        vocab_free(v);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merge_order),
        cmocka_unit_test(test_spm_space_prefix),
        cmocka_unit_test(test_bpe_merge_rank),
        cmocka_unit_test(test_bpe_family_defaults),
        cmocka_unit_test(test_gemma4_by_hand),
        cmocka_unit_test(test_types_by_text),
        cmocka_unit_test(test_phi3_name_strips),
        cmocka_unit_test(test_wpm_normalizer_keys),
        cmocka_unit_test(test_pretokenizers_by_name),
        cmocka_unit_test(test_hostile_metadata),
        cmocka_unit_test(test_room_too_small),
        cmocka_unit_test(test_parse_special),
        cmocka_unit_test(test_user_defined_longest_first),
        cmocka_unit_test(test_special_ids_and_eog),
        cmocka_unit_test(test_hostile_text),
        cmocka_unit_test(test_spm_word_cuts_change_nothing),
        cmocka_unit_test(test_threads_share_a_vocab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
