/* BPE with merges: byte-level (tokenizer.ggml.model = "gpt2") and over
 * characters (tokenizer.ggml.model = "gemma4").
 *
 * Byte-level: the text is cut into words by the family's pre-tokenizer
 * (pretokenize.c). Each byte of a word starts as the token of its GPT-2
 * mapped character (vocab.byte_token); then, repeatedly, the adjacent pair
 * with the lowest merge rank is replaced by its merged token, the leftmost
 * pair first among equal ranks, until no adjacent pair has a merge.
 *
 * Characters (Gemma 4), the rules of llama.cpp's tokenizer for it:
 *   - every space becomes "▁" (U+2581) first; nothing else is normalised
 *     and no space is put in front;
 *   - words are the runs of newlines and the runs of everything else;
 *   - a word made only of newlines that is itself a token is that token
 *     (the vocab has "\n" .. 31 newlines as tokens);
 *   - otherwise each UTF-8 character starts as its token (-1 when it is no
 *     token, which then never merges), merged by rank as above;
 *   - a character that is no token becomes the <0xNN> tokens of its bytes
 *     (a byte without one is dropped, as llama.cpp drops it).
 *   Bytes that are not valid UTF-8 are one symbol each and so always come
 *   out as their <0xNN> token: lossless. (llama.cpp would take a stray lead
 *   byte together with the bytes after it; that differs only on invalid
 *   input.)
 *
 * Cost: the candidate pairs sit in a binary heap keyed by (rank, position);
 * a merge invalidates at most two entries, which are skipped lazily when
 * popped, and adds at most two. A word of n bytes costs O(n log n), so long
 * words (runs of spaces, base64) stay cheap. */
#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct bpe_cand {
    uint32_t rank;
    uint32_t left;  /* symbol index (= its first byte in the word) */
    uint32_t right;
    int32_t left_id, right_id; /* the ids when queued; stale if they changed */
} bpe_cand;

/* Scratch reused across the words of one call. */
typedef struct bpe_scratch {
    int32_t *id;
    uint32_t *off;         /* byte offset of each symbol in the word (chars) */
    uint32_t *prev, *next; /* links between live symbols; UINT32_MAX: none */
    bpe_cand *heap;
    size_t n_heap, cap;  /* cap: symbols room; heap room is 3 * cap */
    char *mapped;        /* the word in mapped characters (ignore_merges) */
} bpe_scratch;

static int scratch_reserve(bpe_scratch *s, size_t n)
{
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    if (cap > SIZE_MAX / (3 * sizeof(bpe_cand))) return -1;
    int32_t *id = realloc(s->id, cap * sizeof(*id));
    if (id) s->id = id;
    uint32_t *off = realloc(s->off, cap * sizeof(*off));
    if (off) s->off = off;
    uint32_t *prev = realloc(s->prev, cap * sizeof(*prev));
    if (prev) s->prev = prev;
    uint32_t *next = realloc(s->next, cap * sizeof(*next));
    if (next) s->next = next;
    bpe_cand *heap = realloc(s->heap, 3 * cap * sizeof(*heap));
    if (heap) s->heap = heap;
    char *mapped = realloc(s->mapped, 2 * cap);
    if (mapped) s->mapped = mapped;
    if (!id || !off || !prev || !next || !heap || !mapped) return -1;
    s->cap = cap;
    return 0;
}

static void scratch_free(bpe_scratch *s)
{
    free(s->id);
    free(s->off);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->mapped);
}

static bool cand_less(const bpe_cand *a, const bpe_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(bpe_scratch *s, bpe_cand c)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static bpe_cand heap_pop(bpe_scratch *s)
{
    bpe_cand top = s->heap[0];
    bpe_cand last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static void try_pair(const vocab *v, bpe_scratch *s, uint32_t left, uint32_t right)
{
    if (left == UINT32_MAX || right == UINT32_MAX) return;
    const tok_merge_slot *m = vocab_merge_find(v, s->id[left], s->id[right]);
    if (m == NULL) return;
    heap_push(s, (bpe_cand){m->rank, left, right, s->id[left], s->id[right]});
}

/* A symbol that is no token (a byte whose mapped character is missing from
 * the vocab): UNK when there is one, else nothing, as Hugging Face's BPE
 * without an unk token does. */
static int push_id(const vocab *v, tok_ivec *out, int32_t id)
{
    if (id < 0) id = v->sp.unk;
    if (id < 0) return 0;
    return tok_ivec_push(out, id);
}

static void merge_symbols(const vocab *v, bpe_scratch *s, size_t n);

static int bpe_word(const vocab *v, const uint8_t *w, size_t n, bpe_scratch *s, tok_ivec *out)
{
    if (n == 1) return push_id(v, out, v->byte_token[w[0]]);
    if (scratch_reserve(s, n) != 0) return -1;
    if (v->ignore_merges) {
        /* Families trained with ignore_merges take a word that is itself a
         * token whole, whatever the merges would make of it. */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            int32_t b = v->byte_token[w[i]];
            if (b < 0) {
                m = 0;
                break;
            }
            memcpy(s->mapped + m, vocab_text_of(v, b), v->tokens[b].len);
            m += v->tokens[b].len;
        }
        int32_t whole = m > 0 ? vocab_find(v, s->mapped, m) : -1;
        if (whole >= 0) return tok_ivec_push(out, whole);
    }
    for (size_t i = 0; i < n; i++) s->id[i] = v->byte_token[w[i]];
    merge_symbols(v, s, n);
    for (uint32_t i = 0; i != UINT32_MAX; i = s->next[i]) {
        if (push_id(v, out, s->id[i]) != 0) return -1;
    }
    return 0;
}

/* Merges the symbols s->id[0..n) (n >= 1) by rank; the live symbols are
 * then the chain from 0 along s->next. */
static void merge_symbols(const vocab *v, bpe_scratch *s, size_t n)
{
    s->n_heap = 0;
    for (size_t i = 0; i < n; i++) {
        s->prev[i] = i == 0 ? UINT32_MAX : (uint32_t)(i - 1);
        s->next[i] = i + 1 == n ? UINT32_MAX : (uint32_t)(i + 1);
    }
    for (size_t i = 0; i + 1 < n; i++) try_pair(v, s, (uint32_t)i, (uint32_t)(i + 1));
    while (s->n_heap > 0) {
        bpe_cand c = heap_pop(s);
        /* Stale: either symbol was merged away or changed since queued. */
        if (s->next[c.left] != c.right || s->id[c.left] != c.left_id || s->id[c.right] != c.right_id) {
            continue;
        }
        const tok_merge_slot *m = vocab_merge_find(v, c.left_id, c.right_id);
        s->id[c.left] = m->merged;
        s->id[c.right] = -2; /* dead: no pair can name it again */
        uint32_t after = s->next[c.right];
        s->next[c.left] = after;
        if (after != UINT32_MAX) s->prev[after] = c.left;
        s->next[c.right] = UINT32_MAX;
        try_pair(v, s, s->prev[c.left], c.left);
        try_pair(v, s, c.left, after);
    }
}

/* One word of a character BPE (see the top of the file). */
static int bpe_char_word(const vocab *v, const uint8_t *w, size_t n, bpe_scratch *s, tok_ivec *out)
{
    if (w[0] == '\n') {
        /* The pre-tokenizer makes newline runs words of their own. */
        int32_t whole = vocab_find(v, (const char *)w, n);
        if (whole >= 0) return tok_ivec_push(out, whole);
    }
    if (scratch_reserve(s, n) != 0) return -1;
    size_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tok_utf8_decode(w + i, n - i, &cp);
        if (cl == 0) cl = 1; /* not valid UTF-8: a byte alone */
        s->off[n_sym] = (uint32_t)i;
        s->id[n_sym] = vocab_find(v, (const char *)w + i, cl);
        n_sym++;
        i += cl;
    }
    merge_symbols(v, s, n_sym);
    for (uint32_t i = 0; i != UINT32_MAX; i = s->next[i]) {
        if (s->id[i] >= 0) {
            if (tok_ivec_push(out, s->id[i]) != 0) return -1;
            continue;
        }
        /* Only a starting symbol can be no token (merges make tokens), so
         * it still spans one character: up to the next symbol's start. */
        size_t end = i + 1 < n_sym ? s->off[i + 1] : n;
        for (size_t b = s->off[i]; b < end; b++) {
            int32_t id = v->byte_token[w[b]];
            if (id >= 0 && tok_ivec_push(out, id) != 0) return -1;
        }
    }
    return 0;
}

/* Gemma 4 sees every space as "▁". */
static char *escape_spaces(const char *text, size_t len, size_t *n_out)
{
    size_t n_spaces = 0;
    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    char *esc = malloc(len + 2 * n_spaces + 1);
    if (esc == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            esc[k++] = text[i];
        }
    }
    *n_out = k;
    return esc;
}

int tok_bpe_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err)
{
    char *esc = NULL;
    if (v->bpe_chars) {
        if ((esc = escape_spaces(text, len, &len)) == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
        text = esc;
    }
    tok_spanvec words = {0};
    int rc = tok_pretok_split(v->pretok, text, len, &words, err);
    if (rc != 0) {
        tok_spanvec_free(&words);
        free(esc);
        return rc;
    }
    bpe_scratch s = {0};
    for (size_t i = 0; i < words.n; i++) {
        const uint8_t *w = (const uint8_t *)text + words.s[i].off;
        int wrc = v->bpe_chars ? bpe_char_word(v, w, words.s[i].len, &s, out)
                               : bpe_word(v, w, words.s[i].len, &s, out);
        if (wrc != 0) {
            rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            break;
        }
    }
    scratch_free(&s);
    tok_spanvec_free(&words);
    free(esc);
    return rc;
}
