/* Loading a vocab from GGUF metadata (see vocab.h): the token table and its
 * text index, special ids and add-BOS/EOS rules, the byte tables of the SPM
 * byte fallback and of GPT-2's byte map, the BPE merge table, the trie of
 * special-token texts, and WordPiece's conventions. Everything read from the
 * file is checked here, so the tokenizers can trust the vocab.
 *
 * Some of what llama.cpp does with a vocab is not in the file but keyed on
 * names, and is done here the same way so that the ids agree: token types
 * overridden by text (end-of-turn and FIM names are CONTROL, gpt-oss's
 * channel markers USER_DEFINED), and whitespace-stripping attributes of
 * special tokens by model name (Phi-3, Jina v2, ModernBERT). */
#include "text/vocab.h"

#include "base/log.h"
#include "text/vocab_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"

/* GGUF writers store "no such token" as -1 or as UINT32_MAX. */
#define TOKEN_NONE_U32 4294967295LL

/* Token texts are copied into one block indexed by 32-bit offsets. */
#define VOCAB_MAX_TEXT_BYTES ((size_t)UINT32_MAX - 1)

/* --- small pieces --------------------------------------------------------- */

enum vocab_kind vocab_get_kind(const vocab *v) { return v->kind; }
int32_t vocab_n_tokens(const vocab *v) { return v->n_tokens; }
const char *vocab_pre_name(const vocab *v) { return v->pre; }
const char *vocab_pretok_name(const vocab *v) { return v->pretok ? tok_pretok_name(v->pretok) : ""; }
const vocab_special *vocab_specials(const vocab *v) { return &v->sp; }
bool vocab_adds_bos(const vocab *v) { return v->add_bos; }
bool vocab_adds_eos(const vocab *v) { return v->add_eos; }
bool vocab_adds_space_prefix(const vocab *v) { return v->add_space_prefix; }

const char *vocab_kind_name(enum vocab_kind kind)
{
    switch (kind) {
    case VOCAB_KIND_SPM: return "llama";
    case VOCAB_KIND_BPE: return "gpt2";
    case VOCAB_KIND_WPM: return "bert";
    default: return "none";
    }
}

const char *vocab_token_text(const vocab *v, int32_t id, size_t *len)
{
    *len = v->tokens[id].len;
    return vocab_text_of(v, id);
}

float vocab_token_score(const vocab *v, int32_t id) { return v->tokens[id].score; }

enum vocab_token_type vocab_token_type(const vocab *v, int32_t id)
{
    return (enum vocab_token_type)v->tokens[id].type;
}

int32_t vocab_find(const vocab *v, const char *text, size_t len)
{
    if (len > v->max_token_len) return -1;
    return (int32_t)strata_strmap_get(&v->by_text, text, len);
}

bool vocab_is_eog(const vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && v->eog[id];
}

bool vocab_is_control(const vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens) return false;
    uint8_t t = v->tokens[id].type;
    return t == VOCAB_TOKEN_CONTROL || t == VOCAB_TOKEN_UNKNOWN;
}

/* --- merges --------------------------------------------------------------- */

static uint64_t merge_key(int32_t left, int32_t right)
{
    return ((uint64_t)(uint32_t)(left + 1) << 32) | (uint64_t)(uint32_t)(right + 1);
}

static size_t merge_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ULL;
    key ^= key >> 33;
    return (size_t)key;
}

const tok_merge_slot *vocab_merge_find(const vocab *v, int32_t left, int32_t right)
{
    if (v->merges_cap == 0 || left < 0 || right < 0) return NULL;
    uint64_t key = merge_key(left, right);
    size_t mask = v->merges_cap - 1;
    for (size_t i = merge_hash(key) & mask;; i = (i + 1) & mask) {
        const tok_merge_slot *s = &v->merges[i];
        if (s->key == key) return s;
        if (s->key == 0) return NULL;
    }
}

/* Inserts unless the pair is already there (an earlier rank wins). */
static void merge_put(vocab *v, int32_t left, int32_t right, uint32_t rank, int32_t merged)
{
    uint64_t key = merge_key(left, right);
    size_t mask = v->merges_cap - 1;
    for (size_t i = merge_hash(key) & mask;; i = (i + 1) & mask) {
        tok_merge_slot *s = &v->merges[i];
        if (s->key == key) return;
        if (s->key == 0) {
            s->key = key;
            s->rank = rank;
            s->merged = merged;
            return;
        }
    }
}

/* --- GPT-2's byte map ----------------------------------------------------- */

/* Byte b maps to itself when it is a printable Latin-1 character
 * ('!'..'~', '¡'..'¬', '®'..'ÿ'); the 68 others map, in byte order, to
 * U+0100, U+0101, ... so every byte has a visible character. */
static uint32_t gpt2_byte_to_cp(uint8_t b, uint32_t *next_extra)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    return 256 + (*next_extra)++;
}

/* --- loading -------------------------------------------------------------- */

static int get_array(const gguf *g, const char *key, enum gguf_vtype want_a, enum gguf_vtype want_b,
                     uint64_t n_want, const gguf_value **out, strata_err *err)
{
    int rc = gguf_get_arr(g, key, out, err);
    if (rc != 0) return rc;
    enum gguf_vtype et = (*out)->v.arr.elem_type;
    bool ok = et == want_a || et == want_b;
    if (want_a == GGUF_VTYPE_INT32) ok = gguf_vtype_is_int(et);
    if (!ok) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: array of %s, expected %s", key,
                              gguf_vtype_name(et), gguf_vtype_name(want_a));
    }
    if (n_want != 0 && (*out)->v.arr.n != n_want) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: %" PRIu64 " elements for %" PRIu64 " tokens",
                              key, (*out)->v.arr.n, n_want);
    }
    return 0;
}

/* Reads an optional id key into *id (left as is when absent). */
static int get_id(const gguf *g, const char *key, int32_t n_tokens, int32_t *id, strata_err *err)
{
    int64_t val;
    int rc = gguf_get_int(g, key, &val, err);
    if (rc == STRATA_ENOTFOUND) return 0;
    if (rc != 0) return rc;
    if (val == -1 || val == TOKEN_NONE_U32) {
        *id = -1;
        return 0;
    }
    if (val < 0 || val >= n_tokens) {
        return strata_err_set(err, STRATA_EFORMAT, "%s = %" PRId64 " is not a token id (vocab of %" PRId32 ")",
                              key, val, n_tokens);
    }
    *id = (int32_t)val;
    return 0;
}

static int get_bool(const gguf *g, const char *key, bool *b, strata_err *err)
{
    int rc = gguf_get_bool(g, key, b, err);
    return rc == STRATA_ENOTFOUND ? 0 : rc;
}

static int load_tokens(vocab *v, const gguf *g, strata_err *err)
{
    const gguf_value *toks, *scores = NULL, *types = NULL;
    int rc = get_array(g, KEY_TOKENS, GGUF_VTYPE_STRING, GGUF_VTYPE_STRING, 0, &toks, err);
    if (rc == STRATA_ENOTFOUND) return strata_err_set(err, STRATA_EFORMAT, "%s is missing", KEY_TOKENS);
    if (rc != 0) return rc;
    uint64_t n = toks->v.arr.n;
    if (n == 0 || n > INT32_MAX - 1) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: %" PRIu64 " tokens (expected 1..%d)", KEY_TOKENS,
                              n, INT32_MAX - 1);
    }
    rc = get_array(g, KEY_SCORES, GGUF_VTYPE_FLOAT32, GGUF_VTYPE_FLOAT64, n, &scores, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) return rc;
    rc = get_array(g, KEY_TYPES, GGUF_VTYPE_INT32, GGUF_VTYPE_INT32, n, &types, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) return rc;

    size_t text_bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(toks, i);
        if (s.len > VOCAB_MAX_TOKEN_BYTES) {
            return strata_err_set(err, STRATA_EFORMAT, "%s[%" PRIu64 "]: %" PRIu64 " bytes (at most %d)",
                                  KEY_TOKENS, i, s.len, VOCAB_MAX_TOKEN_BYTES);
        }
        if (text_bytes > VOCAB_MAX_TEXT_BYTES - s.len - 1) {
            return strata_err_set(err, STRATA_EFORMAT, "%s: token texts exceed 4 GiB", KEY_TOKENS);
        }
        text_bytes += s.len + 1;
    }
    v->n_tokens = (int32_t)n;
    v->tokens = calloc(n, sizeof(*v->tokens));
    v->text = malloc(text_bytes);
    v->eog = calloc(n, sizeof(*v->eog));
    v->special_rank = malloc(n * sizeof(*v->special_rank));
    if (!v->tokens || !v->text || !v->eog || !v->special_rank || strata_strmap_init(&v->by_text, n) != 0) {
        return strata_err_set(err, STRATA_ENOMEM, "out of memory for %" PRIu64 " tokens", n);
    }
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(toks, i);
        vocab_token *t = &v->tokens[i];
        memcpy(v->text + off, s.ptr, s.len);
        v->text[off + s.len] = '\0';
        t->off = (uint32_t)off;
        t->len = (uint32_t)s.len;
        off += s.len + 1;
        if (s.len > v->max_token_len) v->max_token_len = s.len;
        t->type = VOCAB_TOKEN_NORMAL;
        if (types != NULL) {
            int64_t ty = gguf_arr_int(types, i);
            if (ty < VOCAB_TOKEN_UNDEFINED || ty > VOCAB_TOKEN_BYTE) {
                return strata_err_set(err, STRATA_EFORMAT, "%s[%" PRIu64 "] = %" PRId64 " is not a token type",
                                      KEY_TYPES, i, ty);
            }
            t->type = (uint8_t)ty;
        }
        if (scores != NULL) {
            double sc = gguf_arr_float(scores, i);
            if (isnan(sc)) {
                return strata_err_set(err, STRATA_EFORMAT, "%s[%" PRIu64 "] is NaN", KEY_SCORES, i);
            }
            t->score = (float)sc;
        }
        v->special_rank[i] = -1;
        /* Duplicate texts keep the first id, as the other tools do. */
        if (strata_strmap_put(&v->by_text, v->text + t->off, t->len, (int64_t)i, NULL) < 0) {
            return strata_err_set(err, STRATA_ENOMEM, "token index full");
        }
    }
    return 0;
}

static int load_merges(vocab *v, const gguf *g, strata_err *err)
{
    const gguf_value *arr;
    int rc = get_array(g, KEY_MERGES, GGUF_VTYPE_STRING, GGUF_VTYPE_STRING, 0, &arr, err);
    if (rc == STRATA_ENOTFOUND) {
        return strata_err_set(err, STRATA_EFORMAT, "%s is missing (a gpt2 tokenizer needs it)", KEY_MERGES);
    }
    if (rc != 0) return rc;
    uint64_t n = arr->v.arr.n;
    if (n > UINT32_MAX / 4) {
        return strata_err_set(err, STRATA_EFORMAT, "%s: %" PRIu64 " merges is too many", KEY_MERGES, n);
    }
    v->merges_cap = 16;
    while (v->merges_cap < 2 * n) v->merges_cap *= 2;
    v->merges = calloc(v->merges_cap, sizeof(*v->merges));
    char *joined = malloc(v->max_token_len + 1);
    if (v->merges == NULL || joined == NULL) {
        free(joined);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory for %" PRIu64 " merges", n);
    }
    uint64_t n_skipped = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_arr_str(arr, i);
        /* "A B": the space is searched from the second byte, so that a left
         * part may itself be a space. */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (sp == NULL) {
            free(joined);
            return strata_err_set(err, STRATA_EFORMAT, "%s[%" PRIu64 "]: '%.*s' is not two tokens "
                                  "separated by a space", KEY_MERGES, i, (int)(s.len > 64 ? 64 : s.len), s.ptr);
        }
        size_t n_left = (size_t)(sp - s.ptr), n_right = s.len - n_left - 1;
        int32_t left = vocab_find(v, s.ptr, n_left);
        int32_t right = vocab_find(v, sp + 1, n_right);
        int32_t merged = -1;
        if (left >= 0 && right >= 0 && n_left + n_right <= v->max_token_len) {
            memcpy(joined, s.ptr, n_left);
            memcpy(joined + n_left, sp + 1, n_right);
            merged = vocab_find(v, joined, n_left + n_right);
        }
        if (merged < 0) {
            n_skipped++;
            continue;
        }
        merge_put(v, left, right, (uint32_t)i, merged);
    }
    free(joined);
    if (n_skipped > 0) {
        LOG_WARN("vocab: %" PRIu64 " of %" PRIu64 " merges name or make a text that is no token; ignored",
                 n_skipped, n);
    }
    return 0;
}

/* The trie of texts that tok_tokenize cuts out before the algorithm runs:
 * CONTROL, UNKNOWN and USER_DEFINED tokens. Their priority is length first
 * (longest first), then id. */
typedef struct special_key {
    uint32_t len;
    int32_t id;
} special_key;

static int cmp_special(const void *pa, const void *pb)
{
    const special_key *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static bool is_special_type(uint8_t t)
{
    return t == VOCAB_TOKEN_CONTROL || t == VOCAB_TOKEN_UNKNOWN || t == VOCAB_TOKEN_USER_DEFINED;
}

static int build_trie(vocab *v, strata_err *err)
{
    for (int i = 0; i < 256; i++) v->trie_root[i] = -1;
    size_t n_special = 0, n_nodes = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (is_special_type(v->tokens[id].type) && v->tokens[id].len > 0) {
            n_special++;
            n_nodes += v->tokens[id].len;
        }
    }
    if (n_special == 0) return 0;
    special_key *keys = malloc(n_special * sizeof(*keys));
    v->trie = malloc(n_nodes * sizeof(*v->trie));
    if (keys == NULL || v->trie == NULL) {
        free(keys);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory for special tokens");
    }
    size_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        if (is_special_type(v->tokens[id].type) && v->tokens[id].len > 0) {
            keys[k++] = (special_key){v->tokens[id].len, id};
        }
    }
    qsort(keys, n_special, sizeof(*keys), cmp_special);
    for (size_t r = 0; r < n_special; r++) {
        int32_t id = keys[r].id;
        v->special_rank[id] = (int32_t)r;
        const uint8_t *s = (const uint8_t *)vocab_text_of(v, id);
        uint32_t len = v->tokens[id].len;
        int32_t *link = &v->trie_root[s[0]];
        int32_t node = -1;
        for (uint32_t i = 0; i < len; i++) {
            if (i > 0) link = &v->trie[node].first_child;
            int32_t c = *link;
            while (c >= 0 && v->trie[c].byte != s[i]) c = v->trie[c].next_sibling;
            if (c < 0) {
                c = (int32_t)v->n_trie++;
                v->trie[c] = (tok_trie_node){.first_child = -1, .next_sibling = *link, .token = -1,
                                             .byte = s[i]};
                *link = c;
            }
            node = c;
        }
        /* Equal texts: the first in priority (the lower id) keeps the node. */
        if (v->trie[node].token < 0) v->trie[node].token = id;
    }
    free(keys);
    return 0;
}

/* End-of-turn tokens that metadata often leaves out, by their text. */
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "<|eom_id|>", /* "<｜end▁of▁sentence｜>" (DeepSeek); split so that \x9c does not run on */
    ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
    "<|return|>", "<|call|>", "_<EOT>", "<end_of_utterance>",
    "<turn|>", /* Gemma 4's end of turn (its generation config stops on it) */
};

/* Texts that llama.cpp takes for control tokens whatever type the file
 * gives them (it warns "control-looking token ... its type will be
 * overridden"): its end-of-turn and fill-in-the-middle names. With
 * special-token parsing off they are then text, as any control token. */
static const char *const k_control_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<|eom_id|>", "<|return|>", "<|call|>", "<end_of_utterance>",
    ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<REPO>", "<reponame>", "<|file_sep|>",
    ("<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>"),
    ("<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>"),
    ("<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>"),
};

/* gpt-oss's harmony format tokens, which llama.cpp always renders (as
 * USER_DEFINED) so that a client can parse the channels. */
static const char *const k_user_texts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

static void override_types(vocab *v)
{
    for (size_t i = 0; i < sizeof(k_control_texts) / sizeof(k_control_texts[0]); i++) {
        int32_t id = vocab_find(v, k_control_texts[i], strlen(k_control_texts[i]));
        if (id >= 0 && v->tokens[id].type != VOCAB_TOKEN_CONTROL) v->tokens[id].type = VOCAB_TOKEN_CONTROL;
    }
    for (size_t i = 0; i < sizeof(k_user_texts) / sizeof(k_user_texts[0]); i++) {
        int32_t id = vocab_find(v, k_user_texts[i], strlen(k_user_texts[i]));
        if (id >= 0) v->tokens[id].type = VOCAB_TOKEN_USER_DEFINED;
    }
}

static int32_t find_cstr(const vocab *v, const char *s);

/* Fill-in-the-middle tokens the metadata does not name, by the texts the
 * code models use (Qwen, CodeGemma, StarCoder, CodeLlama, GLM-4,
 * DeepSeek): the first found. */
static void find_fim(vocab *v)
{
    static const char *const pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>",
                                      "<|code_prefix|>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", NULL};
    static const char *const suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>",
                                      "<|code_suffix|>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", NULL};
    static const char *const mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>",
                                      "<|code_middle|>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", NULL};
    static const char *const pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", NULL};
    static const char *const rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const sep[] = {"<|file_sep|>", NULL};
    const struct {
        int32_t *id;
        const char *const *texts;
    } kinds[] = {{&v->sp.fim_pre, pre}, {&v->sp.fim_suf, suf}, {&v->sp.fim_mid, mid},
                 {&v->sp.fim_pad, pad}, {&v->sp.fim_rep, rep}, {&v->sp.fim_sep, sep}};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        for (size_t i = 0; *kinds[k].id < 0 && kinds[k].texts[i] != NULL; i++) {
            *kinds[k].id = find_cstr(v, kinds[k].texts[i]);
        }
    }
}

static void mark_eog(vocab *v)
{
    int32_t ids[] = {v->sp.eos, v->sp.eot, v->sp.eom};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        if (ids[i] >= 0) v->eog[ids[i]] = true;
    }
    for (size_t i = 0; i < sizeof(k_eog_texts) / sizeof(k_eog_texts[0]); i++) {
        int32_t id = vocab_find(v, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (id < 0) continue;
        uint8_t t = v->tokens[id].type;
        if (t == VOCAB_TOKEN_CONTROL || t == VOCAB_TOKEN_USER_DEFINED) {
            v->eog[id] = true;
            if (v->sp.eot < 0 && strcmp(k_eog_texts[i], "<|endoftext|>") != 0) v->sp.eot = id;
        }
    }
    /* o200k_harmony (gpt-oss): <|end|> ends a message, not the turn, when
     * the vocab has <|return|> and <|call|>; llama.cpp then also renders
     * it as text. */
    int32_t end = find_cstr(v, "<|end|>"), ret = find_cstr(v, "<|return|>"), call = find_cstr(v, "<|call|>");
    if (end >= 0 && ret >= 0 && call >= 0 && v->eog[ret] && v->eog[call] && v->eog[end] && end != v->sp.eos) {
        v->eog[end] = false;
        if (v->sp.eot == end) v->sp.eot = -1;
        v->tokens[end].type = VOCAB_TOKEN_USER_DEFINED;
    }
}

/* llama.cpp's per-model token attributes (it has no place for them in the
 * file and keys them on names): Phi-3's special tokens swallow the
 * whitespace after them, except <unk>, <s> and <|endoftext|>; the <mask>
 * of Jina v2 and [MASK] of ModernBERT the whitespace before. */
static int set_strip_rules(vocab *v, const gguf *g, strata_err *err)
{
    gguf_str name = {"", 0}, arch = {"", 0};
    int rc = gguf_get_str(g, "general.name", &name, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) return rc;
    if (rc != 0) name = (gguf_str){"", 0};
    rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) return rc;
    if (rc != 0) arch = (gguf_str){"", 0};
    char lower[256];
    size_t n = name.len < sizeof(lower) - 1 ? name.len : sizeof(lower) - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name.ptr[i];
        lower[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    lower[n] = '\0';
    char arch_s[64];
    snprintf(arch_s, sizeof(arch_s), "%.*s", (int)(arch.len > 63 ? 63 : arch.len), arch.ptr);
    if (strstr(v->pre, "jina-v2-de") || strstr(v->pre, "jina-v2-es") || strstr(v->pre, "jina-v2-code") ||
        strstr(arch_s, "nomic-bert-moe") || strstr(arch_s, "jina-bert-v3")) {
        int32_t id = find_cstr(v, "<mask>");
        if (id >= 0) v->tokens[id].strip |= TOK_STRIP_LEFT;
    } else if (strstr(lower, "phi-3") || strstr(lower, "phi3")) {
        for (int32_t id = 0; id < v->n_tokens; id++) {
            if (is_special_type(v->tokens[id].type)) v->tokens[id].strip |= TOK_STRIP_RIGHT;
        }
        int32_t id = find_cstr(v, "</s>");
        if (id >= 0) v->tokens[id].strip |= TOK_STRIP_RIGHT;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < 3; i++) {
            if ((id = find_cstr(v, keep[i])) >= 0) v->tokens[id].strip &= (uint8_t)~TOK_STRIP_RIGHT;
        }
    } else if (strstr(lower, "modern-bert")) {
        int32_t id = find_cstr(v, "[MASK]");
        if (id >= 0) v->tokens[id].strip |= TOK_STRIP_LEFT;
    }
    return 0;
}

static int32_t find_cstr(const vocab *v, const char *s)
{
    return vocab_find(v, s, strlen(s));
}

static int load_specials(vocab *v, const gguf *g, strata_err *err)
{
    vocab_special *sp = &v->sp;
    *sp = (vocab_special){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int32_t n = v->n_tokens;
    if (v->kind == VOCAB_KIND_SPM) {
        /* SentencePiece's conventional layout. */
        if (n > 2) {
            sp->unk = 0;
            sp->bos = 1;
            sp->eos = 2;
        }
    } else if (v->kind == VOCAB_KIND_WPM) {
        sp->unk = find_cstr(v, "[UNK]");
        sp->cls = find_cstr(v, "[CLS]");
        sp->sep = find_cstr(v, "[SEP]");
        sp->pad = find_cstr(v, "[PAD]");
        sp->mask = find_cstr(v, "[MASK]");
    }
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(vocab_special, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(vocab_special, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(vocab_special, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(vocab_special, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(vocab_special, unk)},
        /* The GGUF spec and llama.cpp spell it "seperator". */
        {"tokenizer.ggml.seperator_token_id", offsetof(vocab_special, sep)},
        {"tokenizer.ggml.separator_token_id", offsetof(vocab_special, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(vocab_special, pad)},
        {"tokenizer.ggml.cls_token_id", offsetof(vocab_special, cls)},
        {"tokenizer.ggml.mask_token_id", offsetof(vocab_special, mask)},
        /* the older names first, so the newer win */
        {"tokenizer.ggml.prefix_token_id", offsetof(vocab_special, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(vocab_special, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(vocab_special, fim_mid)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(vocab_special, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(vocab_special, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(vocab_special, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(vocab_special, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(vocab_special, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(vocab_special, fim_sep)},
    };
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        int rc = get_id(g, keys[i].key, n, (int32_t *)((char *)sp + keys[i].off), err);
        if (rc != 0) return rc;
    }
    if (v->kind == VOCAB_KIND_WPM) {
        /* BERT's sequence is [CLS] text [SEP]: those play BOS and EOS. */
        if (sp->cls < 0) sp->cls = sp->bos;
        if (sp->bos < 0) sp->bos = sp->cls;
        if (sp->sep < 0) sp->sep = sp->eos;
        if (sp->eos < 0) sp->eos = sp->sep;
    }

    /* Whether tokenizing with add_special adds them. */
    int rc;
    if (v->kind == VOCAB_KIND_SPM) {
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (v->kind == VOCAB_KIND_WPM) {
        v->add_bos = v->add_eos = true;
    }
    if ((rc = get_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) != 0) return rc;
    if ((rc = get_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) != 0) return rc;
    if (v->kind == VOCAB_KIND_WPM) {
        if ((rc = get_bool(g, "tokenizer.ggml.add_sep_token", &v->add_eos, err)) != 0) return rc;
    }
    if (v->kind == VOCAB_KIND_SPM) {
        if ((rc = get_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) != 0) return rc;
    }
    if (v->add_bos && sp->bos < 0) {
        LOG_WARN("vocab: the tokenizer adds BOS but has no BOS token; none will be added");
        v->add_bos = false;
    }
    if (v->add_eos && sp->eos < 0) {
        LOG_WARN("vocab: the tokenizer adds EOS but has no EOS token; none will be added");
        v->add_eos = false;
    }
    override_types(v);
    mark_eog(v);
    find_fim(v);
    return 0;
}

static void build_byte_tables(vocab *v)
{
    for (int i = 0; i < 256; i++) v->byte_token[i] = -1;
    for (int i = 0; i < 324; i++) v->unmap[i] = -1;
    if (v->kind == VOCAB_KIND_BPE && !v->bpe_chars) {
        uint32_t extra = 0;
        for (int b = 0; b < 256; b++) {
            uint32_t cp = gpt2_byte_to_cp((uint8_t)b, &extra);
            char u[4];
            size_t n = tok_utf8_encode(cp, u);
            v->byte_token[b] = vocab_find(v, u, n);
            v->unmap[cp] = (int16_t)b;
        }
    } else {
        /* SentencePiece's byte fallback pieces "<0x00>".."<0xFF>". */
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            v->byte_token[b] = find_cstr(v, name);
        }
    }
}

/* Whether SentencePiece may merge word by word: true when no token it can
 * merge into (NORMAL, USER_DEFINED) has a "▁" right after a character
 * other than "▁" (see tokenize_spm.c). */
static bool spm_allows_word_cuts(const vocab *v)
{
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const vocab_token *t = &v->tokens[id];
        if (t->type != VOCAB_TOKEN_NORMAL && t->type != VOCAB_TOKEN_USER_DEFINED) continue;
        const char *s = vocab_text_of(v, id);
        for (uint32_t j = 1; j + 3 <= t->len; j++) {
            if (memcmp(s + j, "\xe2\x96\x81", 3) != 0) continue;
            if (j < 3 || memcmp(s + j - 3, "\xe2\x96\x81", 3) != 0) return false;
        }
    }
    return true;
}

/* WordPiece vocabs converted by llama.cpp mark word starts with "▁" and
 * drop "##" from continuations; the original BERT files do the reverse.
 * BERT's uncased models lowercase and strip accents: a vocab none of whose
 * ordinary tokens has an ASCII capital is taken to be one of them (when the
 * file does not say, see load_wpm_normalizer). */
static void detect_wpm_conventions(vocab *v)
{
    size_t n_phantom = 0, n_hashes = 0, n_upper = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const vocab_token *t = &v->tokens[id];
        const char *s = vocab_text_of(v, id);
        if (t->len >= 3 && memcmp(s, "\xe2\x96\x81", 3) == 0) n_phantom++;
        if (t->len >= 2 && s[0] == '#' && s[1] == '#') n_hashes++;
        if (t->type != VOCAB_TOKEN_NORMAL) continue;
        for (uint32_t i = 0; i < t->len; i++) {
            if (s[i] >= 'A' && s[i] <= 'Z') {
                n_upper++;
                break;
            }
        }
    }
    v->wpm_phantom = n_phantom >= n_hashes;
    v->wpm_lowercase = n_upper == 0;
    v->wpm_strip_accents = v->wpm_lowercase;
}

/* BertNormalizer's options when the file states them: strip_accents
 * follows lowercase unless given itself. */
static int load_wpm_normalizer(vocab *v, const gguf *g, strata_err *err)
{
    bool lower;
    int rc = gguf_get_bool(g, "tokenizer.ggml.normalizer.lowercase", &lower, err);
    if (rc == 0) v->wpm_lowercase = v->wpm_strip_accents = lower;
    else if (rc != STRATA_ENOTFOUND) return rc;
    return get_bool(g, "tokenizer.ggml.normalizer.strip_accents", &v->wpm_strip_accents, err);
}

int vocab_load(vocab **out, const gguf *g, strata_err *err)
{
    *out = NULL;
    gguf_str model;
    int rc = gguf_get_str(g, KEY_MODEL, &model, err);
    if (rc == STRATA_ENOTFOUND) return strata_err_set(err, STRATA_ENOTFOUND, "the file has no %s", KEY_MODEL);
    if (rc != 0) return rc;

    vocab *v = calloc(1, sizeof(*v));
    if (v == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
#define MODEL_IS(s) (model.len == strlen(s) && memcmp(model.ptr, s, model.len) == 0)
    if (MODEL_IS("llama")) v->kind = VOCAB_KIND_SPM;
    else if (MODEL_IS("gpt2")) v->kind = VOCAB_KIND_BPE;
    else if (MODEL_IS("gemma4")) {
        /* Gemma 4: BPE with merges, over UTF-8 characters with spaces as
         * "▁" and <0xNN> byte fallback, like SentencePiece's text but
         * merged by rank (tokenize_bpe.c). */
        v->kind = VOCAB_KIND_BPE;
        v->bpe_chars = true;
    }
    else if (MODEL_IS("bert")) v->kind = VOCAB_KIND_WPM;
    else if (MODEL_IS("none") || model.len == 0) v->kind = VOCAB_KIND_NONE;
    else {
        free(v);
        return strata_err_set(err, STRATA_EUNSUPPORTED,
                              "%s = '%.*s' is not supported (llama, gpt2, gemma4, bert, none)",
                              KEY_MODEL, (int)(model.len > 32 ? 32 : model.len), model.ptr);
    }
#undef MODEL_IS

    gguf_str pre = {"", 0};
    rc = gguf_get_str(g, KEY_PRE, &pre, err);
    if (rc != 0 && rc != STRATA_ENOTFOUND) goto fail;
    if (rc == STRATA_ENOTFOUND) pre = (gguf_str){"", 0};
    snprintf(v->pre, sizeof(v->pre), "%.*s", (int)(pre.len > 63 ? 63 : pre.len), pre.ptr);
    for (char *c = v->pre; *c; c++) {
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7F) *c = '?';
    }

    for (int i = 0; i < 256; i++) v->trie_root[i] = -1;
    v->sp = (vocab_special){-1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (v->kind == VOCAB_KIND_NONE) {
        /* No tokenizer; tokens, when present, only give ids a text. */
        if (gguf_find_kv(g, KEY_TOKENS) == NULL) {
            *out = v;
            return 0;
        }
    }
    if ((rc = load_tokens(v, g, err)) != 0) goto fail;
    if ((rc = load_specials(v, g, err)) != 0) goto fail;
    build_byte_tables(v);
    if ((rc = build_trie(v, err)) != 0) goto fail;
    if ((rc = set_strip_rules(v, g, err)) != 0) goto fail;
    if (v->kind == VOCAB_KIND_BPE) {
        if ((rc = load_merges(v, g, err)) != 0) goto fail;
        bool family_add_bos = false;
        /* Gemma 4's files carry no tokenizer.ggml.pre (or any value): its
         * splitting is part of the tokenizer model, as in llama.cpp, which
         * sets the pre-tokenizer "gemma4" whatever the file says. */
        const char *pre_name = v->bpe_chars ? "gemma4" : v->pre;
        if ((rc = tok_pretok_compile(&v->pretok, pre_name, &v->ignore_merges, &family_add_bos, err)) != 0) {
            goto fail;
        }
        /* The family's habit, unless the file says otherwise; Gemma 4 always
         * starts with BOS (llama.cpp turns add_bos on for it even when the
         * file says false). */
        bool key_add_bos;
        if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &key_add_bos, NULL) != 0 ||
            (v->bpe_chars && !v->add_bos)) {
            v->add_bos = family_add_bos && v->sp.bos >= 0;
        }
    }
    if (v->kind == VOCAB_KIND_WPM) {
        detect_wpm_conventions(v);
        if ((rc = load_wpm_normalizer(v, g, err)) != 0) goto fail;
    }
    if (v->kind == VOCAB_KIND_SPM) v->spm_word_cuts = spm_allows_word_cuts(v);
    *out = v;
    return 0;
fail:
    vocab_free(v);
    return rc;
}

int vocab_open(vocab **out, const char *path, strata_err *err)
{
    gguf *g;
    *out = NULL;
    int rc = gguf_open(&g, path, err);
    if (rc != 0) return rc;
    rc = vocab_load(out, g, err);
    if (rc != 0 && err != NULL) {
        char msg[STRATA_ERR_MSG_MAX];
        snprintf(msg, sizeof(msg), "%s", err->msg);
        strata_err_set(err, rc, "%s: %s", path, msg);
    }
    gguf_close(g);
    return rc;
}

void vocab_free(vocab *v)
{
    if (v == NULL) return;
    free(v->tokens);
    free(v->text);
    free(v->eog);
    free(v->special_rank);
    free(v->trie);
    free(v->merges);
    strata_strmap_free(&v->by_text);
    tok_pretok_free(v->pretok);
    free(v);
}
