/* SentencePiece BPE (tokenizer.ggml.model = "llama").
 *
 * The input arrives escaped (spaces as "▁", the leading-space prefix added
 * by the caller). It starts as one symbol per UTF-8 character (a byte that
 * is not part of a valid character is a symbol alone); then,
 * repeatedly, the adjacent pair whose concatenation is a token with the
 * highest score is merged (the leftmost pair among equal scores), until no
 * adjacent pair concatenates to a token. Only NORMAL and USER_DEFINED tokens
 * are merge targets: control, unknown, unused and byte pieces are not text
 * SentencePiece segments into. A symbol left that is no token (a character
 * outside the vocab) becomes one <0xNN> token per byte (byte fallback), or
 * UNK in a vocab without byte pieces.
 *
 * Symbols are always contiguous in the input, so the text of a pair is a
 * slice of it: lookups hash the slice without copying. Candidates sit in a
 * heap keyed by (score, position) and stale ones are skipped when popped,
 * which makes the whole input O(n log n). */
#include "text/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_cand {
    float score;
    uint32_t left, right; /* symbol indices */
    uint32_t n_bytes;     /* the pair's length when queued; stale if changed */
    int32_t id;
} spm_cand;

typedef struct spm_state {
    const vocab *v;
    const char *text;
    uint32_t *start, *len;
    uint32_t *prev, *next; /* UINT32_MAX: none */
    int32_t *id;           /* token of a merged symbol; -1 for a single character */
    spm_cand *heap;
    size_t n_heap;
} spm_state;

static bool cand_before(const spm_cand *a, const spm_cand *b)
{
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

static void heap_push(spm_state *s, spm_cand c)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static spm_cand heap_pop(spm_state *s)
{
    spm_cand top = s->heap[0];
    spm_cand last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!cand_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static bool is_merge_target(uint8_t type)
{
    return type == VOCAB_TOKEN_NORMAL || type == VOCAB_TOKEN_USER_DEFINED;
}

static void try_pair(spm_state *s, uint32_t left, uint32_t right)
{
    if (left == UINT32_MAX || right == UINT32_MAX) return;
    uint32_t n = s->len[left] + s->len[right];
    int32_t id = vocab_find(s->v, s->text + s->start[left], n);
    if (id < 0 || !is_merge_target(s->v->tokens[id].type)) return;
    heap_push(s, (spm_cand){s->v->tokens[id].score, left, right, n, id});
}

static int emit_symbol(const spm_state *s, uint32_t i, tok_ivec *out)
{
    const vocab *v = s->v;
    int32_t id = s->id[i];
    if (id < 0) {
        id = vocab_find(v, s->text + s->start[i], s->len[i]);
        if (id >= 0 && !is_merge_target(v->tokens[id].type)) id = -1;
    }
    if (id >= 0) return tok_ivec_push(out, id);
    /* Byte fallback, one token per byte; UNK for a vocab without them. */
    const uint8_t *b = (const uint8_t *)s->text + s->start[i];
    bool have_bytes = true;
    for (uint32_t k = 0; k < s->len[i]; k++) have_bytes = have_bytes && v->byte_token[b[k]] >= 0;
    if (!have_bytes) return v->sp.unk >= 0 ? tok_ivec_push(out, v->sp.unk) : 0;
    for (uint32_t k = 0; k < s->len[i]; k++) {
        if (tok_ivec_push(out, v->byte_token[b[k]]) != 0) return -1;
    }
    return 0;
}

/* Runs BPE on text[0..len) (one chunk), appending to out. */
static int spm_chunk(spm_state *s, const char *text, size_t len, tok_ivec *out)
{
    s->text = text;
    s->n_heap = 0;
    size_t n = 0;
    for (size_t off = 0; off < len; n++) {
        /* A byte that does not start a valid character is a symbol of its
         * own, so that it cannot swallow the bytes after it (a "▁" above
         * all): such input stays lossless through the byte fallback. */
        uint32_t cp;
        size_t cl = tok_utf8_decode((const uint8_t *)text + off, len - off, &cp);
        if (cl == 0) cl = 1;
        s->start[n] = (uint32_t)off;
        s->len[n] = (uint32_t)cl;
        s->prev[n] = n == 0 ? UINT32_MAX : (uint32_t)(n - 1);
        s->next[n] = (uint32_t)(n + 1);
        s->id[n] = -1;
        off += cl;
    }
    s->next[n - 1] = UINT32_MAX;
    for (size_t i = 0; i + 1 < n; i++) try_pair(s, (uint32_t)i, (uint32_t)(i + 1));
    while (s->n_heap > 0) {
        spm_cand c = heap_pop(s);
        if (s->len[c.left] == 0 || s->next[c.left] != c.right ||
            s->len[c.left] + s->len[c.right] != c.n_bytes) {
            continue; /* one side was merged since this pair was queued */
        }
        s->len[c.left] = c.n_bytes;
        s->id[c.left] = c.id;
        s->len[c.right] = 0;
        uint32_t after = s->next[c.right];
        s->next[c.left] = after;
        if (after != UINT32_MAX) s->prev[after] = c.left;
        try_pair(s, s->prev[c.left], c.left);
        try_pair(s, c.left, after);
    }
    for (uint32_t i = 0; i != UINT32_MAX; i = s->next[i]) {
        if (emit_symbol(s, i, out) != 0) return -1;
    }
    return 0;
}

#define SPACE "\xe2\x96\x81"

static bool is_space_at(const char *text, size_t len, size_t pos)
{
    return len - pos >= 3 && memcmp(text + pos, SPACE, 3) == 0;
}

/* Where the chunk that starts at begin ends: in front of the next "▁" that
 * follows another character when the vocab allows word cuts
 * (vocab.spm_word_cuts: no token can span that point), else at the end. */
static size_t chunk_end(const vocab *v, const char *text, size_t len, size_t begin)
{
    if (!v->spm_word_cuts) return len;
    for (size_t pos = begin + 1; pos < len; pos++) {
        if (is_space_at(text, len, pos) && !(pos >= 3 && memcmp(text + pos - 3, SPACE, 3) == 0)) return pos;
    }
    return len;
}

int tok_spm_encode(const vocab *v, const char *text, size_t len, tok_ivec *out, strata_err *err)
{
    if (len == 0) return 0;
    if (len >= UINT32_MAX / 4) return strata_err_set(err, STRATA_ERANGE, "text too long");
    /* Words are merged one at a time, each on its own small heap, with the
     * same result as the whole text at once; the buffers are sized for the
     * longest word. */
    size_t max_chunk = 0;
    for (size_t begin = 0, end; begin < len; begin = end) {
        end = chunk_end(v, text, len, begin);
        if (end - begin > max_chunk) max_chunk = end - begin;
    }
    spm_state s = {.v = v};
    s.start = malloc(max_chunk * sizeof(*s.start));
    s.len = malloc(max_chunk * sizeof(*s.len));
    s.prev = malloc(max_chunk * sizeof(*s.prev));
    s.next = malloc(max_chunk * sizeof(*s.next));
    s.id = malloc(max_chunk * sizeof(*s.id));
    /* Each symbol queues at most one pair at start and each merge two more:
     * fewer than 3n entries in all. */
    s.heap = malloc(3 * max_chunk * sizeof(*s.heap));
    int rc = 0;
    if (!s.start || !s.len || !s.prev || !s.next || !s.id || !s.heap) {
        rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t begin = 0, end; begin < len; begin = end) {
        end = chunk_end(v, text, len, begin);
        if (spm_chunk(&s, text + begin, end - begin, out) != 0) {
            rc = strata_err_set(err, STRATA_ENOMEM, "out of memory");
            break;
        }
    }
done:
    free(s.start);
    free(s.len);
    free(s.prev);
    free(s.next);
    free(s.id);
    free(s.heap);
    return rc;
}
