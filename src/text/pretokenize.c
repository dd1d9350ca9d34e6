/* The pre-tokenizers of byte-level BPE families: the regular expressions
 * that cut text into words before merges run, one list per family as each
 * family's tokenizer.json defines it, compiled once with PCRE2 (Unicode
 * properties, JIT) and applied as Hugging Face's "Isolated" splits: every
 * expression in turn cuts each piece from the previous one into matches and
 * the gaps between them.
 *
 * Matching runs on one piece at a time, so lookarounds never see past its
 * ends. Invalid UTF-8 is allowed in the input (PCRE2_MATCH_INVALID_UTF):
 * such bytes never match and end up in gaps, which keeps tokenization
 * lossless for any bytes.
 *
 * Where a family's pattern has a form that backtracks quadratically on
 * hostile input, it is written in an equivalent form that does not; the
 * comment at the pattern says why they agree. */
#include "text/vocab_internal.h"

#include "base/log.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

#define PRETOK_MAX_PATTERNS 6

/* GPT-2's pattern (also the ByteLevel pre-tokenizer's default). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* The contractions, in either case. Spelled letter by letter rather than
 * as tokenizer.json's (?i:'s|'t|...): under Unicode case folding "s" would
 * also match U+017F (long s), which llama.cpp's patterns ("'[sS]") and its
 * own splitters for these families do not. */
#define RE_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* Llama 3 (and cl100k-style): case-insensitive contractions, a letter run
 * with one leading non-letter, digits in threes, punctuation with trailing
 * newlines, newline runs. */
#define RE_LLAMA3                                                                         \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"                             \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Qwen2: as Llama 3 but digits one at a time. */
#define RE_QWEN2                                                                          \
    RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"                                  \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Qwen 3.5: as Qwen2, with combining marks (\p{M}) counted as letters, so
 * that a base letter and its marks stay one word ("e\u0301", Khmer vowel
 * signs), and excluded from the punctuation run. */
#define RE_QWEN35                                                                         \
    RE_CONTRACTIONS                                                                       \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"                                       \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* o200k (GPT-4o, gpt-oss, Llama 4): case-aware letter runs with
 * contractions. These use the real Unicode case classes, as tiktoken and
 * Hugging Face do. llama.cpp's regex engine has no \p{Lu}, so it rewrites
 * them as "a letter other than a-z" / "other than A-Z", which makes every
 * non-ASCII letter both upper and lower case: on text such as "écoleÉCOLE"
 * its words (and ids) differ from the model's own tokenizer. Here the
 * model's are kept; for ASCII text the two agree. */
#define RE_UPPER "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_LOWER "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_CONTR RE_CONTRACTIONS "?"
#define RE_GPT4O                                                                          \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+" RE_CONTR                            \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*" RE_CONTR                           \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Tekken (Mistral Nemo and later): as o200k without contractions, single
 * digits. */
#define RE_TEKKEN                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "*" RE_LOWER "+"                                     \
    "|[^\\r\\n\\p{L}\\p{N}]?" RE_UPPER "+" RE_LOWER "*"                                    \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* DeepSeek LLM's letter class: an explicit list of Latin, Greek, Cyrillic,
 * Armenian, Georgian, Cherokee, Glagolitic, Coptic, ... ranges (not \p{L}:
 * scripts outside it, such as Han or Arabic, fall through to later passes). */
#define RE_DS_LETTERS                                                                      \
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"        \
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}" \
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"          \
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"               \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"         \
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"         \
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"         \
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}" \
    "\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}" \
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"          \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"           \
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}" \
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}" \
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"          \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"         \
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"       \
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}" \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"

/* DeepSeek's "CJK" class as published: U+4E00-U+9FA5, U+0800-U+4E00 and
 * U+AC00-U+D7FF (wider than the name says; kept as is, it decides splits). */
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* "\s+$" tried at every start inside a long run of spaces that is not at
 * the end backtracks over the whole run each time: quadratic. A match can
 * only start where the run does (its leftmost start), so "(?<!\s)" may be
 * required in front without changing any result, and then each run is
 * scanned once. */
#define RE_TRAILING_SPACE "(?<!\\s)\\s+$"

typedef struct pretok_family {
    const char *name;
    const char *patterns[PRETOK_MAX_PATTERNS]; /* NULL-terminated */
    bool ignore_merges;
    bool add_bos;
} pretok_family;

static const pretok_family k_families[] = {
    {"gpt-2", {RE_GPT2}, false, false},
    /* llama.cpp's "default" for byte-level BPE: punctuation runs, GPT-2's,
     * digit runs, then groups of three digits. */
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3", {RE_LLAMA3}, true, true},
    {"llama3-like", {RE_LLAMA3}, false, false}, /* dbrx, smaug, chatglm4 */
    {"qwen2", {RE_QWEN2}, false, false},
    {"qwen35", {RE_QWEN35}, false, false},
    {"deepseek-llm",
     {"[\\r\\n]", "\\s?[" RE_DS_LETTERS "]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      RE_TRAILING_SPACE, RE_DS_CJK, "\\p{N}+"},
     false, false},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}"}, false, false},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
      "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false, false},
    /* Falcon: runs of punctuation first (HF's Punctuation pre-tokenizer:
     * \p{P} plus the ASCII symbols), then GPT-2's, then three-digit
     * groups. */
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    /* StarCoder and kin: every digit alone, then GPT-2's. */
    {"starcoder", {"\\p{N}", RE_GPT2}, false, false},
    {"gpt-4o", {RE_GPT4O}, false, false},
    /* Seed-Coder: Qwen2's with no newlines inside a punctuation run. */
    {"seed-coder",
     {RE_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}\\r\\n]+"
      "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false, false},
    {"tekken", {RE_TEKKEN}, true, true},
    /* Gemma 4's character BPE: no word splitting at all, only runs of
     * newlines cut apart from the rest (its merges never join a newline
     * with anything else, so this changes no result, it only bounds the
     * length of what is merged at once). */
    {"gemma4", {"[^\\n]+|[\\n]+"}, false, true},
    {"bloom", {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"}, false, false},
    {"viking", {" ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+", "\\p{N}"},
     false, false},
};

/* tokenizer.ggml.pre values -> family, as llama.cpp maps them. A name that
 * is not here (or none, as in GPT-NeoX's files) gets GPT-2's pattern with a
 * warning: that is Hugging Face's ByteLevel default, which those files were
 * made with, where llama.cpp would take its "default" (a guess it warns
 * degrades generation). A file that names "default" gets llama.cpp's. */
static const struct {
    const char *pre;
    const char *family;
} k_aliases[] = {
    {"default", "default"},     {"gpt-2", "gpt-2"},          {"gpt2", "gpt-2"},
    {"trillion", "gpt-2"},      {"granite-docling", "gpt-2"},
    {"mpt", "gpt-2"},           {"olmo", "gpt-2"},           {"jais", "gpt-2"},
    {"phi-2", "gpt-2"},         {"roberta-bpe", "gpt-2"},    {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},       {"jina-v1-en", "gpt-2"},     {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},    {"jina-v2-code", "gpt-2"},   {"gpt-neox", "gpt-2"},
    {"llama3", "llama3"},       {"llama-v3", "llama3"},      {"llama-bpe", "llama3"},
    {"falcon3", "llama3"},      {"falcon-h1", "llama3"},     {"dbrx", "llama3-like"},
    {"smaug-bpe", "llama3-like"}, {"chatglm-bpe", "llama3-like"},
    {"qwen2", "qwen2"},         {"stablelm2", "qwen2"},      {"deepseek-r1-qwen", "qwen2"},
    {"megrez", "qwen2"},         {"qwen35", "qwen35"},
    {"hunyuan", "qwen2"},       {"grok-2", "qwen2"},
    /* Ling / BailingMoE's pattern differs from Qwen2's only by "\s*[\r\n]"
     * for "\s*[\r\n]+" (both take a whitespace run up to its last newline)
     * and possessive quantifiers that llama.cpp runs greedy. */
    {"bailingmoe", "qwen2"},    {"bailingmoe2", "qwen2"},    {"llada-moe", "qwen2"},
    {"seed-coder", "seed-coder"},
    {"deepseek-llm", "deepseek-llm"}, {"deepseek-coder", "deepseek-coder"},
    {"deepseek-v3", "deepseek-v3"}, {"hunyuan-dense", "deepseek-v3"},
    {"falcon", "falcon"},
    {"starcoder", "starcoder"}, {"refact", "starcoder"},     {"command-r", "starcoder"},
    {"smollm", "starcoder"},    {"codeshell", "starcoder"},  {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
    {"gpt-4o", "gpt-4o"},       {"llama4", "gpt-4o"},        {"minimax-m2", "gpt-4o"},
    {"tekken", "tekken"},       {"pixtral", "tekken"},
    {"bloom", "bloom"},         {"poro-chat", "bloom"},      {"gpt3-finnish", "bloom"},
    {"viking", "viking"},       {"gemma4", "gemma4"},
};

struct tok_pretok {
    const pretok_family *family;
    size_t n;
    pcre2_code *code[PRETOK_MAX_PATTERNS];
};

const char *tok_pretok_name(const tok_pretok *p) { return p->family->name; }

void tok_pretok_free(tok_pretok *p)
{
    if (p == NULL) return;
    for (size_t i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

static const pretok_family *find_family(const char *name)
{
    for (size_t i = 0; i < sizeof(k_families) / sizeof(k_families[0]); i++) {
        if (strcmp(k_families[i].name, name) == 0) return &k_families[i];
    }
    return NULL;
}

int tok_pretok_compile(tok_pretok **out, const char *pre, bool *ignore_merges, bool *add_bos,
                       strata_err *err)
{
    *out = NULL;
    const char *fam_name = NULL;
    for (size_t i = 0; i < sizeof(k_aliases) / sizeof(k_aliases[0]); i++) {
        if (strcmp(k_aliases[i].pre, pre) == 0) fam_name = k_aliases[i].family;
    }
    if (fam_name == NULL) {
        if (pre[0] != '\0') {
            LOG_WARN("vocab: unknown pre-tokenizer '%s'; using GPT-2's (words may split differently "
                     "from the model's training)", pre);
        }
        fam_name = "gpt-2";
    }
    const pretok_family *fam = find_family(fam_name);
    tok_pretok *p = calloc(1, sizeof(*p));
    if (p == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    p->family = fam;
    for (size_t i = 0; i < PRETOK_MAX_PATTERNS && fam->patterns[i] != NULL; i++) {
        int ecode;
        PCRE2_SIZE eoff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)fam->patterns[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF |
                                           PCRE2_DOLLAR_ENDONLY,
                                       &ecode, &eoff, NULL);
        if (re == NULL) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ecode, msg, sizeof(msg));
            tok_pretok_free(p);
            return strata_err_set(err, STRATA_EUNSUPPORTED,
                                  "pre-tokenizer %s, pattern %zu: PCRE2 error at %zu: %s", fam->name, i,
                                  (size_t)eoff, (const char *)msg);
        }
        /* Without JIT (not built in, or no executable memory) matching still
         * works through the interpreter, only slower. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        p->code[p->n++] = re;
    }
    *ignore_merges = fam->ignore_merges;
    *add_bos = fam->add_bos;
    *out = p;
    return 0;
}

/* --- splitting ------------------------------------------------------------ */

static int span_push(tok_spanvec *v, size_t off, size_t len)
{
    if (len == 0) return 0;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        tok_span *s = realloc(v->s, cap * sizeof(*s));
        if (s == NULL) return -1;
        v->s = s;
        v->cap = cap;
    }
    v->s[v->n++] = (tok_span){off, len};
    return 0;
}

void tok_spanvec_free(tok_spanvec *v)
{
    free(v->s);
    v->s = NULL;
    v->n = v->cap = 0;
}

/* Per-call matching state: match data and, only when a pattern needs more
 * than the default JIT stack, a larger one. */
typedef struct split_state {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
} split_state;

static int grow_jit_stack(split_state *st)
{
    if (st->jit_stack != NULL) return -1; /* already at the largest */
    st->mctx = pcre2_match_context_create(NULL);
    st->jit_stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, NULL);
    if (st->mctx == NULL || st->jit_stack == NULL) return -1;
    pcre2_jit_stack_assign(st->mctx, NULL, st->jit_stack);
    return 0;
}

/* Cuts piece text[off..off+len) by re into out. */
static int split_piece(const pcre2_code *re, const char *text, size_t off, size_t len, split_state *st,
                       tok_spanvec *out, strata_err *err)
{
    const PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t start = 0;
    while (start < len) {
        int rc = pcre2_match(re, subj, len, start, PCRE2_NOTEMPTY, st->md, st->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && grow_jit_stack(st) == 0) continue;
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return strata_err_set(err, rc == PCRE2_ERROR_NOMEMORY ? STRATA_ENOMEM : STRATA_EUNSUPPORTED,
                                  "pre-tokenizer gave up at byte %zu: %s", off + start, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0 || m0 < start || m1 > len) break; /* cannot happen with NOTEMPTY */
        if (span_push(out, off + start, m0 - start) != 0 || span_push(out, off + m0, m1 - m0) != 0) {
            return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        }
        start = m1;
    }
    if (span_push(out, off + start, len - start) != 0) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    return 0;
}

int tok_pretok_split(const tok_pretok *p, const char *text, size_t len, tok_spanvec *out,
                     strata_err *err)
{
    out->n = 0;
    if (len == 0) return 0;
    split_state st = {0};
    st.md = pcre2_match_data_create(1, NULL);
    tok_spanvec tmp = {0};
    int rc = 0;
    if (st.md == NULL || span_push(out, 0, len) != 0) {
        rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < p->n; k++) {
        /* out holds the pieces so far; cut each into tmp, then swap. */
        tmp.n = 0;
        for (size_t i = 0; i < out->n; i++) {
            rc = split_piece(p->code[k], text, out->s[i].off, out->s[i].len, &st, &tmp, err);
            if (rc != 0) goto done;
        }
        tok_spanvec t = *out;
        *out = tmp;
        tmp = t;
    }
done:
    tok_spanvec_free(&tmp);
    pcre2_match_data_free(st.md);
    pcre2_match_context_free(st.mctx);
    pcre2_jit_stack_free(st.jit_stack);
    return rc;
}
