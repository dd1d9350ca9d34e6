/* The recognizer and the token masks (see grammar.h).
 *
 * A parse in progress is a stack of grammar positions: the top is the
 * character set to match next, each lower entry is where to continue once
 * the rule above it is finished. Stacks are hash-consed nodes (position,
 * parent), so equal stacks are equal node ids and share their tails. A
 * state is a *set* of such stacks (sorted node ids, with node 0 the empty
 * stack, "the output may end here") plus the bytes of a half-read UTF-8
 * character; sets are interned too, so a state is one integer.
 *
 * Every transition (set, byte) -> set is memoized in a 256-entry table per
 * set, filled on first use. accept_bytes is then one lookup per byte, and
 * the mask walks the vocabulary's byte trie (laid out in preorder, each
 * node knowing where its subtree ends) with one lookup per trie node,
 * skipping a whole subtree at the first byte that cannot continue. On top
 * of that, the last few masks are kept per state id: outputs revisit the
 * same states (inside a string, between the items of a list) all the time.
 *
 * The tables belong to one grammar_state and only grow while it lives;
 * past a bound they are rebuilt from the current state alone. */
#include "sample/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY_NODE 0u
#define T_UNKNOWN (-1)
#define T_DEAD (-2)
#define SOFT_MAX_SETS (1u << 15)  /* rebuild the tables past this many sets */
#define SOFT_MAX_NODES (1u << 21) /* or this many nodes */
#define MASK_CACHE 8

typedef struct gnode {
    uint32_t elem, parent, depth;
} gnode;

typedef struct gset {
    uint32_t off, n;       /* items[off .. off+n): node ids, ascending */
    uint32_t utf8_val;     /* the bits read of a partial character */
    uint8_t utf8_rem;      /* continuation bytes still expected; 0: none */
    uint8_t utf8_len;      /* the partial character's full length */
    int32_t trans;         /* index of its 256 transitions in trans[], or -1 */
    uint64_t hash;
} gset;

struct grammar_vocab {
    int32_t n_tokens;
    uint32_t n_nodes;
    struct vnode {
        uint32_t end;    /* preorder index just past this node's subtree */
        uint32_t tok_off, n_tok;
        uint32_t depth;  /* bytes from the root; the root itself is not stored */
        uint8_t byte;
    } *nodes;
    int32_t *toks;       /* tokens ending at each node, by node */
    uint32_t max_depth;
};

struct grammar_state {
    const grammar *g;

    gnode *nodes;
    uint32_t *node_mark; /* per node: last expansion epoch that saw it */
    uint32_t n_nodes;
    size_t cap_nodes, cap_marks;
    uint32_t *node_ht;   /* open addressing; node id + 1, 0 empty */
    uint32_t node_ht_cap;

    gset *sets;
    uint32_t n_sets;
    size_t cap_sets;
    uint32_t *set_ht;
    uint32_t set_ht_cap;
    uint32_t *items;
    size_t n_items, cap_items;
    int32_t *trans;
    size_t n_trans, cap_trans; /* in blocks of 256 */

    uint32_t cur;
    uint32_t epoch;
    bool overflow, nomem;

    uint32_t *work, *out; /* expansion scratch */
    size_t cap_work, cap_out, n_work, n_out;

    /* the walk's state per trie depth */
    uint32_t *walk;
    size_t cap_walk;

    /* recent masks, by set id */
    const grammar_vocab *cache_vocab;
    uint32_t *cache_bits; /* MASK_CACHE * words */
    uint32_t cache_set[MASK_CACHE];
    uint64_t cache_used[MASK_CACHE];
    int64_t cache_count[MASK_CACHE];
    uint64_t clock;
};

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *nb = realloc(*buf, c * elem);
    if (nb == NULL) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* --- nodes --- */

static uint64_t node_hash(uint32_t elem, uint32_t parent) { return mix(mix(7, elem), parent); }

static int node_rehash(grammar_state *s, uint32_t cap)
{
    uint32_t *ht = calloc(cap, sizeof(uint32_t));
    if (ht == NULL) return -1;
    for (uint32_t i = 1; i < s->n_nodes; i++) {
        uint32_t h = (uint32_t)node_hash(s->nodes[i].elem, s->nodes[i].parent) & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = i + 1;
    }
    free(s->node_ht);
    s->node_ht = ht;
    s->node_ht_cap = cap;
    return 0;
}

/* The stack (elem on top of parent); UINT32_MAX on overflow or no memory. */
static uint32_t node_get(grammar_state *s, uint32_t elem, uint32_t parent)
{
    uint32_t h = (uint32_t)node_hash(elem, parent) & (s->node_ht_cap - 1);
    for (uint32_t v; (v = s->node_ht[h]) != 0; h = (h + 1) & (s->node_ht_cap - 1)) {
        const gnode *n = &s->nodes[v - 1];
        if (n->elem == elem && n->parent == parent) return v - 1;
    }
    uint32_t depth = s->nodes[parent].depth + 1;
    if (depth > GRAMMAR_MAX_DEPTH) {
        s->overflow = true;
        return UINT32_MAX;
    }
    if (grow((void **)&s->nodes, &s->cap_nodes, (size_t)s->n_nodes + 1, sizeof(gnode)) ||
        grow((void **)&s->node_mark, &s->cap_marks, (size_t)s->n_nodes + 1, sizeof(uint32_t))) {
        s->nomem = true;
        return UINT32_MAX;
    }
    uint32_t id = s->n_nodes++;
    s->nodes[id] = (gnode){elem, parent, depth};
    s->node_mark[id] = 0;
    s->node_ht[h] = id + 1;
    if ((uint64_t)s->n_nodes * 2 > s->node_ht_cap && node_rehash(s, s->node_ht_cap * 2)) {
        s->nomem = true;
        return UINT32_MAX;
    }
    return id;
}

/* --- expansion: from stacks whose top may be a rule reference (or finished)
 * to stacks whose top is a character set, or the empty stack --- */

static bool work_push(grammar_state *s, uint32_t node)
{
    if (node == UINT32_MAX) return false;
    if (grow((void **)&s->work, &s->cap_work, s->n_work + 1, sizeof(uint32_t))) {
        s->nomem = true;
        return false;
    }
    s->work[s->n_work++] = node;
    return true;
}

/* Pushes the stacks that start rule `rule` with continuation cont. */
static bool push_rule(grammar_state *s, uint32_t rule, uint32_t cont)
{
    const grammar *g = s->g;
    for (uint32_t a = 0; a < g->rule_n_alts[rule]; a++) {
        uint32_t start = g->alts[g->rule_alt0[rule] + a];
        uint32_t n = g->elems[start].type == GE_END ? cont : node_get(s, start, cont);
        if (!work_push(s, n)) return false;
    }
    return true;
}

/* Drains the work list into out (deduplicated). False on overflow. */
static bool expand(grammar_state *s)
{
    const grammar *g = s->g;
    while (s->n_work > 0) {
        uint32_t n = s->work[--s->n_work];
        if (s->node_mark[n] == s->epoch) continue;
        s->node_mark[n] = s->epoch;
        const grammar_elem *e = n == EMPTY_NODE ? NULL : &g->elems[s->nodes[n].elem];
        if (e == NULL || e->type == GE_CHAR) {
            if (s->n_out >= GRAMMAR_MAX_STACKS) {
                s->overflow = true;
                return false;
            }
            if (grow((void **)&s->out, &s->cap_out, s->n_out + 1, sizeof(uint32_t))) {
                s->nomem = true;
                return false;
            }
            s->out[s->n_out++] = n;
        } else { /* GE_REF: its rule, then what follows it */
            uint32_t elem = s->nodes[n].elem, parent = s->nodes[n].parent;
            uint32_t cont = g->elems[elem + 1].type == GE_END ? parent : node_get(s, elem + 1, parent);
            if (cont == UINT32_MAX || !push_rule(s, e->a, cont)) return false;
        }
    }
    return true;
}

static void begin_expand(grammar_state *s)
{
    s->n_work = s->n_out = 0;
    if (++s->epoch == 0) { /* wrapped: clear the marks */
        memset(s->node_mark, 0, s->n_nodes * sizeof(uint32_t));
        s->epoch = 1;
    }
}

/* --- sets --- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static uint64_t set_hash(const uint32_t *it, uint32_t n, uint32_t val, uint8_t rem, uint8_t len)
{
    uint64_t h = mix(mix(mix(11, val), rem), len);
    for (uint32_t i = 0; i < n; i++) h = mix(h, it[i]);
    return h;
}

static int set_rehash(grammar_state *s, uint32_t cap)
{
    uint32_t *ht = calloc(cap, sizeof(uint32_t));
    if (ht == NULL) return -1;
    for (uint32_t i = 0; i < s->n_sets; i++) {
        uint32_t h = (uint32_t)s->sets[i].hash & (cap - 1);
        while (ht[h]) h = (h + 1) & (cap - 1);
        ht[h] = i + 1;
    }
    free(s->set_ht);
    s->set_ht = ht;
    s->set_ht_cap = cap;
    return 0;
}

/* Interns the set of items it[0..n) (sorted here) with a UTF-8 partial;
 * returns its id or T_DEAD when memory runs out. */
static int32_t set_intern(grammar_state *s, uint32_t *it, uint32_t n, uint32_t val, uint8_t rem,
                          uint8_t len)
{
    qsort(it, n, sizeof(uint32_t), cmp_u32);
    uint64_t hash = set_hash(it, n, val, rem, len);
    uint32_t h = (uint32_t)hash & (s->set_ht_cap - 1);
    for (uint32_t v; (v = s->set_ht[h]) != 0; h = (h + 1) & (s->set_ht_cap - 1)) {
        const gset *q = &s->sets[v - 1];
        if (q->hash == hash && q->n == n && q->utf8_val == val && q->utf8_rem == rem &&
            q->utf8_len == len && memcmp(s->items + q->off, it, n * sizeof(uint32_t)) == 0) {
            return (int32_t)(v - 1);
        }
    }
    if (grow((void **)&s->sets, &s->cap_sets, (size_t)s->n_sets + 1, sizeof(gset))) {
        s->nomem = true;
        return T_DEAD;
    }
    if (grow((void **)&s->items, &s->cap_items, s->n_items + n, sizeof(uint32_t))) {
        s->nomem = true;
        return T_DEAD;
    }
    memcpy(s->items + s->n_items, it, n * sizeof(uint32_t));
    uint32_t id = s->n_sets++;
    s->sets[id] = (gset){(uint32_t)s->n_items, n, val, rem, len, -1, hash};
    s->n_items += n;
    s->set_ht[h] = id + 1;
    if ((uint64_t)s->n_sets * 2 > s->set_ht_cap && set_rehash(s, s->set_ht_cap * 2)) {
        s->nomem = true;
        return T_DEAD;
    }
    return (int32_t)id;
}

/* --- transitions --- */

/* The set after byte b from set id, computed (not memoized). */
static int32_t step_compute(grammar_state *s, uint32_t id, uint8_t b)
{
    const grammar *g = s->g;
    gset q = s->sets[id];
    uint32_t val = q.utf8_val;
    uint8_t rem = q.utf8_rem, len = q.utf8_len;
    if (rem == 0) {
        if (b < 0x80) val = b, len = 1, rem = 0;
        else if (b >= 0xC2 && b <= 0xDF) val = b & 0x1Fu, len = 2, rem = 1;
        else if (b >= 0xE0 && b <= 0xEF) val = b & 0x0Fu, len = 3, rem = 2;
        else if (b >= 0xF0 && b <= 0xF4) val = b & 0x07u, len = 4, rem = 3;
        else return T_DEAD;
    } else {
        if ((b & 0xC0) != 0x80) return T_DEAD;
        val = (val << 6) | (b & 0x3Fu);
        rem--;
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    static const uint32_t max_cp[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    if (rem > 0) {
        /* a character half read: go on if some stack can take one of the
         * characters it may still become */
        uint32_t lo = val << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
        if (lo < min_cp[len]) lo = min_cp[len];
        if (hi > max_cp[len]) hi = max_cp[len];
        if (lo > hi) return T_DEAD;
        /* surrogates (U+D800..DFFF) are no characters: the part of the
         * range below them and the part above, either possibly empty (so
         * that ED A0..BF, which only surrogates follow, is dead at once
         * rather than a prefix no byte can complete) */
        uint32_t lo2 = lo > 0xE000 ? lo : 0xE000, hi1 = hi < 0xD7FF ? hi : 0xD7FF;
        bool any = false;
        for (uint32_t i = 0; i < q.n && !any; i++) {
            uint32_t n = s->items[q.off + i];
            if (n == EMPTY_NODE) continue;
            const grammar_elem *el = &g->elems[s->nodes[n].elem];
            any = (lo <= hi1 && grammar_elem_meets(g, el, lo, hi1)) ||
                  (lo2 <= hi && grammar_elem_meets(g, el, lo2, hi));
        }
        if (!any) return T_DEAD;
        if (grow((void **)&s->out, &s->cap_out, q.n ? q.n : 1, sizeof(uint32_t))) {
            s->nomem = true;
            return T_DEAD;
        }
        memcpy(s->out, s->items + q.off, q.n * sizeof(uint32_t));
        return set_intern(s, s->out, q.n, val, rem, len);
    }
    uint32_t cp = val;
    if (cp < min_cp[len] || cp > max_cp[len] || (cp >= 0xD800 && cp <= 0xDFFF)) return T_DEAD;
    begin_expand(s);
    for (uint32_t i = 0; i < q.n; i++) {
        uint32_t n = s->items[q.off + i]; /* re-read: items may move as nodes grow */
        if (n == EMPTY_NODE) continue;
        uint32_t elem = s->nodes[n].elem;
        if (!grammar_elem_has(g, &g->elems[elem], cp)) continue;
        uint32_t parent = s->nodes[n].parent;
        uint32_t next = g->elems[elem + 1].type == GE_END ? parent : node_get(s, elem + 1, parent);
        if (!work_push(s, next)) return T_DEAD;
        if (!expand(s)) return T_DEAD;
    }
    if (s->n_out == 0) return T_DEAD;
    return set_intern(s, s->out, (uint32_t)s->n_out, 0, 0, 0);
}

static int32_t step(grammar_state *s, uint32_t id, uint8_t b)
{
    int32_t t = s->sets[id].trans;
    if (t >= 0) {
        int32_t v = s->trans[(size_t)t * 256 + b];
        if (v != T_UNKNOWN) return v;
    } else {
        if (grow((void **)&s->trans, &s->cap_trans, (s->n_trans + 1) * 256, sizeof(int32_t))) {
            s->nomem = true;
            return T_DEAD;
        }
        t = (int32_t)s->n_trans++;
        for (size_t i = 0; i < 256; i++) s->trans[(size_t)t * 256 + i] = T_UNKNOWN;
        s->sets[id].trans = t;
    }
    int32_t v = step_compute(s, id, b);
    /* a continuation cut by the limits is as dead as an invalid one (so the
     * mask and accept_bytes agree); s->overflow remembers that it happened */
    if (!s->nomem) s->trans[(size_t)t * 256 + b] = v;
    return v;
}

/* --- building and rebuilding --- */

static void tables_free(grammar_state *s)
{
    free(s->nodes), free(s->node_mark), free(s->node_ht);
    free(s->sets), free(s->set_ht), free(s->items), free(s->trans);
    s->nodes = NULL, s->node_mark = NULL, s->node_ht = NULL;
    s->sets = NULL, s->set_ht = NULL, s->items = NULL, s->trans = NULL;
    s->n_nodes = s->n_sets = 0;
    s->cap_nodes = s->cap_marks = s->cap_sets = 0;
    s->n_items = s->cap_items = s->n_trans = s->cap_trans = 0;
}

static int tables_init(grammar_state *s)
{
    s->node_ht_cap = 1024;
    s->set_ht_cap = 256;
    s->node_ht = calloc(s->node_ht_cap, sizeof(uint32_t));
    s->set_ht = calloc(s->set_ht_cap, sizeof(uint32_t));
    s->cap_nodes = s->cap_marks = 256;
    s->nodes = malloc(s->cap_nodes * sizeof(gnode));
    s->node_mark = calloc(s->cap_marks, sizeof(uint32_t));
    if (!s->node_ht || !s->set_ht || !s->nodes || !s->node_mark) return -1;
    s->nodes[0] = (gnode){UINT32_MAX, 0, 0};
    s->n_nodes = 1;
    s->epoch = 0;
    return 0;
}

/* Rebuilds the tables holding only the current state (memoized transitions,
 * other sets and the mask cache are dropped). */
static void state_rebuild(grammar_state *s)
{
    gset q = s->sets[s->cur];
    size_t total = 0;
    for (uint32_t i = 0; i < q.n; i++) total += s->nodes[s->items[q.off + i]].depth;
    uint32_t *chains = malloc((total + 1) * sizeof(uint32_t));
    uint32_t *lens = malloc((q.n + 1) * sizeof(uint32_t));
    grammar_state old = *s;
    if (!chains || !lens) {
        free(chains), free(lens);
        s->nomem = true;
        return;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < q.n; i++) {
        lens[i] = 0;
        for (uint32_t n = s->items[q.off + i]; n != EMPTY_NODE; n = s->nodes[n].parent) {
            chains[k++] = s->nodes[n].elem;
            lens[i]++;
        }
    }
    s->nodes = NULL, s->node_mark = NULL, s->node_ht = NULL;
    s->sets = NULL, s->set_ht = NULL, s->items = NULL, s->trans = NULL;
    s->n_nodes = s->n_sets = 0;
    s->cap_nodes = s->cap_marks = s->cap_sets = 0;
    s->n_items = s->cap_items = s->n_trans = s->cap_trans = 0;
    tables_free(&old);
    s->cache_vocab = NULL;
    if (tables_init(s)) {
        s->nomem = true;
    } else {
        uint32_t *it = malloc((q.n + 1) * sizeof(uint32_t));
        k = 0;
        for (uint32_t i = 0; it && i < q.n; i++) {
            uint32_t n = EMPTY_NODE;
            for (uint32_t j = lens[i]; j-- > 0;) n = node_get(s, chains[k + j], n);
            k += lens[i];
            it[i] = n;
        }
        int32_t id = it && !s->nomem ? set_intern(s, it, q.n, q.utf8_val, q.utf8_rem, q.utf8_len) : T_DEAD;
        if (id < 0) s->nomem = true;
        else s->cur = (uint32_t)id;
        free(it);
    }
    free(chains), free(lens);
}

static void maybe_rebuild(grammar_state *s)
{
    if (s->n_sets > SOFT_MAX_SETS || s->n_nodes > SOFT_MAX_NODES) state_rebuild(s);
}

int grammar_state_new(grammar_state **out, const grammar *g, strata_err *err)
{
    *out = NULL;
    grammar_state *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->g = g, tables_init(s))) {
        grammar_state_free(s);
        return strata_err_set(err, STRATA_ENOMEM, "grammar: out of memory");
    }
    begin_expand(s);
    bool ok = push_rule(s, g->root, EMPTY_NODE) && expand(s);
    int32_t id = ok ? set_intern(s, s->out, (uint32_t)s->n_out, 0, 0, 0) : T_DEAD;
    if (id < 0) {
        bool over = s->overflow;
        grammar_state_free(s);
        return over ? strata_err_set(err, STRATA_ERANGE,
                                     "grammar: its start has over %u alternatives at once",
                                     GRAMMAR_MAX_STACKS)
                    : strata_err_set(err, STRATA_ENOMEM, "grammar: out of memory");
    }
    s->cur = (uint32_t)id;
    *out = s;
    return 0;
}

void grammar_state_free(grammar_state *s)
{
    if (s == NULL) return;
    tables_free(s);
    free(s->work), free(s->out), free(s->walk), free(s->cache_bits);
    free(s);
}

bool grammar_state_accept_bytes(grammar_state *s, const uint8_t *bytes, size_t n)
{
    if (s->nomem) return false;
    maybe_rebuild(s);
    uint32_t id = s->cur;
    for (size_t i = 0; i < n; i++) {
        int32_t t = step(s, id, bytes[i]);
        if (t < 0) return false;
        id = (uint32_t)t;
    }
    s->cur = id;
    return true;
}

bool grammar_state_can_accept(grammar_state *s, const uint8_t *bytes, size_t n)
{
    if (s->nomem) return false;
    maybe_rebuild(s); /* first, so that accept_bytes does not renumber the sets */
    uint32_t keep = s->cur;
    bool ok = grammar_state_accept_bytes(s, bytes, n);
    s->cur = keep;
    return ok;
}

bool grammar_state_can_end(const grammar_state *s)
{
    const gset *q = &s->sets[s->cur];
    return q->utf8_rem == 0 && q->n > 0 && s->items[q->off] == EMPTY_NODE; /* sorted: 0 first */
}

bool grammar_state_overflowed(const grammar_state *s) { return s->overflow || s->nomem; }

/* --- vocabulary trie --- */

typedef struct tok_ref {
    const uint8_t *b;
    size_t len;
    int32_t id;
} tok_ref;

static int cmp_tok(const void *a, const void *b)
{
    const tok_ref *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->b, y->b, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int grammar_vocab_new(grammar_vocab **out, int32_t n_tokens, const uint8_t *const *bytes,
                      const size_t *lens, strata_err *err)
{
    *out = NULL;
    if (n_tokens < 0) return strata_err_set(err, STRATA_EINVAL, "grammar vocab: %d tokens", n_tokens);
    grammar_vocab *v = calloc(1, sizeof(*v));
    tok_ref *t = malloc(((size_t)n_tokens + 1) * sizeof(tok_ref));
    size_t n = 0, total = 0, max_len = 0;
    if (v && t) {
        for (int32_t i = 0; i < n_tokens; i++) {
            if (lens[i] == 0) continue;
            t[n++] = (tok_ref){bytes[i], lens[i], i};
            total += lens[i];
            if (lens[i] > max_len) max_len = lens[i];
        }
    }
    if (v && t && total >= UINT32_MAX) {
        free(t), free(v);
        return strata_err_set(err, STRATA_ERANGE, "grammar vocab: too many token bytes");
    }
    uint32_t *path = v && t ? malloc((max_len + 1) * sizeof(uint32_t)) : NULL;
    if (v && t && path) {
        v->nodes = malloc((total + 1) * sizeof(*v->nodes)); /* at most one node per byte */
        v->toks = malloc((n + 1) * sizeof(int32_t));
    }
    if (!v || !t || !path || !v->nodes || !v->toks) {
        free(t), free(path);
        grammar_vocab_free(v);
        return strata_err_set(err, STRATA_ENOMEM, "grammar vocab: out of memory");
    }
    qsort(t, n, sizeof(tok_ref), cmp_tok);
    v->n_tokens = n_tokens;
    v->max_depth = (uint32_t)max_len;
    uint32_t nn = 0, nt = 0;
    size_t open = 0; /* path[1..open] are the nodes of the previous token */
    for (size_t i = 0; i < n; i++) {
        size_t lcp = 0;
        if (i > 0) {
            size_t m = t[i - 1].len < t[i].len ? t[i - 1].len : t[i].len;
            while (lcp < m && t[i - 1].b[lcp] == t[i].b[lcp]) lcp++;
        }
        if (lcp > open) lcp = open;
        while (open > lcp) v->nodes[path[open--]].end = nn;
        for (size_t d = lcp + 1; d <= t[i].len; d++) {
            v->nodes[nn] = (struct vnode){0, nt, 0, (uint32_t)d, t[i].b[d - 1]};
            path[d] = nn++;
        }
        open = t[i].len;
        struct vnode *leaf = &v->nodes[path[open]];
        if (leaf->n_tok == 0) leaf->tok_off = nt;
        leaf->n_tok++;
        v->toks[nt++] = t[i].id;
    }
    while (open > 0) v->nodes[path[open--]].end = nn;
    v->n_nodes = nn;
    free(t), free(path);
    *out = v;
    return 0;
}

void grammar_vocab_free(grammar_vocab *v)
{
    if (v == NULL) return;
    free(v->nodes), free(v->toks);
    free(v);
}

int32_t grammar_vocab_n_tokens(const grammar_vocab *v) { return v->n_tokens; }

size_t grammar_mask_words(const grammar_vocab *v) { return ((size_t)v->n_tokens + 31) / 32; }

/* --- masks --- */

static int64_t mask_walk(grammar_state *s, const grammar_vocab *v, uint32_t *allowed)
{
    size_t words = grammar_mask_words(v);
    memset(allowed, 0, words * sizeof(uint32_t));
    if (grow((void **)&s->walk, &s->cap_walk, (size_t)v->max_depth + 1, sizeof(uint32_t))) {
        s->nomem = true;
        return -1;
    }
    uint32_t *walk = s->walk;
    walk[0] = s->cur;
    int64_t count = 0;
    const struct vnode *nodes = v->nodes;
    for (uint32_t i = 0; i < v->n_nodes;) {
        const struct vnode *nd = &nodes[i];
        uint32_t from = walk[nd->depth - 1];
        int32_t to;
        int32_t tr = s->sets[from].trans;
        if (tr >= 0 && (to = s->trans[(size_t)tr * 256 + nd->byte]) != T_UNKNOWN) {
            /* memoized */
        } else {
            to = step(s, from, nd->byte);
            if (s->nomem) return -1;
        }
        if (to < 0) {
            i = nd->end;
            continue;
        }
        walk[nd->depth] = (uint32_t)to;
        for (uint32_t k = 0; k < nd->n_tok; k++) {
            int32_t id = v->toks[nd->tok_off + k];
            allowed[id / 32] |= 1u << (id % 32);
        }
        count += nd->n_tok;
        i++;
    }
    return count;
}

int64_t grammar_state_mask(grammar_state *s, const grammar_vocab *v, uint32_t *allowed)
{
    size_t words = grammar_mask_words(v);
    if (s->nomem) {
        memset(allowed, 0, words * sizeof(uint32_t));
        return -1;
    }
    maybe_rebuild(s);
    if (s->cache_vocab != v) {
        free(s->cache_bits);
        s->cache_bits = malloc(MASK_CACHE * words * sizeof(uint32_t) + 1);
        s->cache_vocab = s->cache_bits ? v : NULL;
        for (int i = 0; i < MASK_CACHE; i++) s->cache_set[i] = UINT32_MAX, s->cache_used[i] = 0;
    }
    if (s->cache_vocab == v) {
        for (int i = 0; i < MASK_CACHE; i++) {
            if (s->cache_set[i] == s->cur) {
                s->cache_used[i] = ++s->clock;
                memcpy(allowed, s->cache_bits + (size_t)i * words, words * sizeof(uint32_t));
                return s->cache_count[i];
            }
        }
    }
    uint32_t cur = s->cur;
    int64_t count = mask_walk(s, v, allowed);
    if (count < 0) {
        memset(allowed, 0, words * sizeof(uint32_t));
        return -1;
    }
    if (s->cache_vocab == v) {
        int lru = 0;
        for (int i = 1; i < MASK_CACHE; i++) {
            if (s->cache_used[i] < s->cache_used[lru]) lru = i;
        }
        s->cache_set[lru] = cur;
        s->cache_used[lru] = ++s->clock;
        s->cache_count[lru] = count;
        memcpy(s->cache_bits + (size_t)lru * words, allowed, words * sizeof(uint32_t));
    }
    return count;
}
