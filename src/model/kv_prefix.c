/* The prefix cache's index over the KV pool (see kv_prefix.h): a hash table
 * of published blocks chained through per-block links, the LRU list of
 * idle blocks, each sequence's publishing cursor, and the copy on write of
 * a cached block a sequence must write into. Everything is sized by the
 * pool and allocated in kv_prefix_enable; nothing here allocates later. */
#include "model/kv_prefix.h"

#include "base/chainhash.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct kv_prefix {
    int32_t max_idle;
    int32_t n_indexed, n_idle;
    uint64_t next_serial;         /* serials start at 1; 0 means "not listed" */
    uint32_t bucket_mask;         /* n_buckets - 1, a power of two >= n_blocks */
    int32_t *bucket;              /* (n_buckets) first block of the chain, -1 none */
    int32_t *hnext;               /* (n_blocks) next block of the same bucket */
    uint64_t *hash;               /* (n_blocks) chain hash of the prefix through the block */
    uint64_t *serial;             /* (n_blocks) the entry's serial, 0: not listed */
    uint64_t *parent;             /* (n_blocks) the serial of the previous block's entry */
    int32_t *tokens;              /* (n_blocks, block_tokens) the block's token ids */
    int32_t *lru_prev, *lru_next; /* (n_blocks) idle list links, -1 at the ends */
    int32_t lru_old, lru_new;     /* oldest and newest idle block, -1 when none */
    /* per sequence: how far it is published and the chain there */
    int32_t *n_pub;               /* (n_seq_max) leading blocks published or found listed */
    uint64_t *pub_hash;           /* (n_seq_max) chain hash after them */
    uint64_t *pub_serial;         /* (n_seq_max) serial of the last one's entry */
    int64_t lookup_tokens, hit_tokens, evictions;
    /* sliding windows (kv_prefix.h): the window block the index keeps for
     * a listed block, and a scratch chain for kv_prefix_match */
    int32_t *w_of;                /* (n_blocks) window block id, -1 none */
    int32_t *chain;               /* (n_blocks) */
};

int kv_prefix_enable(kv_cache *kv, int32_t max_idle_blocks, strata_err *err)
{
    if (kv->prefix != NULL) return strata_err_set(err, STRATA_EINVAL, "prefix cache: already on");
    for (int s = 0; s < kv->n_seq_max; s++) {
        if (kv->seqs[s].active) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "prefix cache: turned on while sequence %d is active", s);
        }
    }
    kv_prefix *p = calloc(1, sizeof(*p));
    if (p == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    size_t nb = (size_t)kv->n_blocks, ns = (size_t)kv->n_seq_max;
    uint32_t n_buckets = 1;
    while (n_buckets < (uint32_t)kv->n_blocks && n_buckets < (1u << 30)) n_buckets <<= 1;
    p->bucket_mask = n_buckets - 1;
    p->max_idle = max_idle_blocks < 0 || max_idle_blocks > kv->n_blocks ? kv->n_blocks
                                                                        : max_idle_blocks;
    p->next_serial = 1;
    p->lru_old = p->lru_new = -1;
    p->bucket = malloc(n_buckets * sizeof(int32_t));
    p->hnext = malloc(nb * sizeof(int32_t));
    p->hash = calloc(nb, sizeof(uint64_t));
    p->serial = calloc(nb, sizeof(uint64_t));
    p->parent = calloc(nb, sizeof(uint64_t));
    p->tokens = malloc(nb * (size_t)kv->block_tokens * sizeof(int32_t));
    p->lru_prev = malloc(nb * sizeof(int32_t));
    p->lru_next = malloc(nb * sizeof(int32_t));
    p->n_pub = calloc(ns, sizeof(int32_t));
    p->pub_hash = malloc(ns * sizeof(uint64_t));
    p->pub_serial = calloc(ns, sizeof(uint64_t));
    p->w_of = malloc(nb * sizeof(int32_t));
    p->chain = malloc(nb * sizeof(int32_t));
    if (!p->bucket || !p->hnext || !p->hash || !p->serial || !p->parent || !p->tokens ||
        !p->lru_prev || !p->lru_next || !p->n_pub || !p->pub_hash || !p->pub_serial ||
        !p->w_of || !p->chain) {
        kv_prefix_destroy(p);
        return strata_err_set(err, STRATA_ENOMEM, "prefix cache: out of memory for its index");
    }
    for (uint32_t i = 0; i < n_buckets; i++) p->bucket[i] = -1;
    for (size_t i = 0; i < nb; i++) {
        p->hnext[i] = p->lru_prev[i] = p->lru_next[i] = p->w_of[i] = -1;
    }
    for (size_t s = 0; s < ns; s++) p->pub_hash[s] = CHAINHASH_ROOT;
    kv->prefix = p;
    return 0;
}

void kv_prefix_destroy(kv_prefix *p)
{
    if (p == NULL) return;
    free(p->bucket);
    free(p->hnext);
    free(p->hash);
    free(p->serial);
    free(p->parent);
    free(p->tokens);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->n_pub);
    free(p->pub_hash);
    free(p->pub_serial);
    free(p->w_of);
    free(p->chain);
    free(p);
}

bool kv_prefix_enabled(const kv_cache *kv)
{
    return kv->prefix != NULL;
}

int32_t kv_prefix_n_idle(const kv_cache *kv)
{
    return kv->prefix != NULL ? kv->prefix->n_idle : 0;
}

void kv_prefix_get_stats(const kv_cache *kv, kv_prefix_stats *out)
{
    memset(out, 0, sizeof(*out));
    const kv_prefix *p = kv->prefix;
    if (p == NULL) return;
    out->blocks_cached = p->n_indexed;
    out->blocks_idle = p->n_idle;
    out->max_idle = p->max_idle;
    out->lookup_tokens = p->lookup_tokens;
    out->hit_tokens = p->hit_tokens;
    out->evictions = p->evictions;
}

/* ---- the index ---- */

/* The listed block with this hash, parent entry and tokens; -1 when none.
 * The hash only picks the bucket and filters: the tokens decide. */
static int32_t index_find(const kv_cache *kv, uint64_t hash, uint64_t parent,
                          const int32_t *tokens)
{
    const kv_prefix *p = kv->prefix;
    size_t row = (size_t)kv->block_tokens * sizeof(int32_t);
    for (int32_t b = p->bucket[hash & p->bucket_mask]; b >= 0; b = p->hnext[b]) {
        if (p->hash[b] == hash && p->parent[b] == parent &&
            memcmp(p->tokens + (size_t)b * (size_t)kv->block_tokens, tokens, row) == 0) {
            return b;
        }
    }
    return -1;
}

/* Lists block b (held by a sequence) and takes the index's reference. */
static void index_insert(kv_cache *kv, int32_t b, uint64_t hash, uint64_t parent,
                         const int32_t *tokens)
{
    kv_prefix *p = kv->prefix;
    assert(p->serial[b] == 0 && kv->refcount[b] >= 1);
    p->serial[b] = p->next_serial++;
    p->hash[b] = hash;
    p->parent[b] = parent;
    memcpy(p->tokens + (size_t)b * (size_t)kv->block_tokens, tokens,
           (size_t)kv->block_tokens * sizeof(int32_t));
    uint32_t h = (uint32_t)(hash & p->bucket_mask);
    p->hnext[b] = p->bucket[h];
    p->bucket[h] = b;
    kv->refcount[b]++;
    p->n_indexed++;
}

/* Lets go of the window block the index keeps for listed block b. */
static void window_detach(kv_cache *kv, int32_t b)
{
    kv_prefix *p = kv->prefix;
    if (p->w_of[b] < 0) return;
    kv_window_unref(kv, p->w_of[b]);
    p->w_of[b] = -1;
}

/* Unlists block b (and its window); the caller drops the index's
 * reference. */
static void index_remove(kv_cache *kv, int32_t b)
{
    kv_prefix *p = kv->prefix;
    assert(p->serial[b] != 0);
    window_detach(kv, b);
    int32_t *link = &p->bucket[p->hash[b] & p->bucket_mask];
    while (*link != b) {
        assert(*link >= 0);
        link = &p->hnext[*link];
    }
    *link = p->hnext[b];
    p->hnext[b] = -1;
    p->serial[b] = 0;
    p->n_indexed--;
}

/* ---- windows ---- */

void kv_prefix_on_window_drop(kv_cache *kv, int32_t b, int32_t wb)
{
    kv_prefix *p = kv->prefix;
    if (p != NULL && p->serial[b] != 0 && p->w_of[b] == wb) window_detach(kv, b);
}

int32_t kv_prefix_evict_windows(kv_cache *kv, int32_t n)
{
    kv_prefix *p = kv->prefix;
    if (p == NULL || kv->layer_swa == NULL) return 0;
    int32_t freed = 0;
    /* the windows only the index holds: idle chains first, oldest first,
     * then any listed block's */
    for (int32_t b = p->lru_old; b >= 0 && freed < n; b = p->lru_next[b]) {
        if (p->w_of[b] >= 0 && kv->w_refcount[p->w_of[b]] == 1) {
            window_detach(kv, b);
            freed++;
        }
    }
    for (int32_t b = 0; b < kv->n_blocks && freed < n; b++) {
        if (p->serial[b] != 0 && p->w_of[b] >= 0 && kv->w_refcount[p->w_of[b]] == 1) {
            window_detach(kv, b);
            freed++;
        }
    }
    return freed;
}

/* How many of the m leading blocks of chain a sequence may go on from:
 * the most k such that the window layers have, kept in the index, the
 * blocks a query at the reuse's end sees (from end - n_swa + 1; the end is
 * k blocks, or n - 1 when they cover all n tokens). *lo_block gets the
 * first of them. Without window layers: m. */
static int32_t window_usable(const kv_cache *kv, const int32_t *chain, int32_t m, int64_t n,
                             int32_t *lo_block)
{
    *lo_block = 0;
    if (kv->layer_swa == NULL) return m;
    const kv_prefix *p = kv->prefix;
    const int64_t bt = kv->block_tokens;
    for (int32_t k = m; k > 0; k--) {
        int64_t end = (int64_t)k * bt == n ? n - 1 : (int64_t)k * bt;
        int64_t lo = end - kv->n_swa + 1;
        int32_t lo_b = lo > 0 ? (int32_t)(lo / bt) : 0;
        bool ok = true;
        for (int32_t i = lo_b; i < k && ok; i++) ok = p->w_of[chain[i]] >= 0;
        if (ok) {
            *lo_block = lo_b;
            return k;
        }
    }
    return 0;
}

/* ---- the idle list ---- */

static void lru_unlink(kv_prefix *p, int32_t b)
{
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0) p->lru_next[prev] = next;
    else p->lru_old = next;
    if (next >= 0) p->lru_prev[next] = prev;
    else p->lru_new = prev;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_idle--;
}

bool kv_prefix_evict_one(kv_cache *kv)
{
    kv_prefix *p = kv->prefix;
    if (p == NULL || p->lru_old < 0) return false;
    int32_t b = p->lru_old;
    assert(kv->refcount[b] == 1);
    lru_unlink(p, b);
    index_remove(kv, b);
    kv->refcount[b] = 0;
    kv_block_free(kv, b);
    p->evictions++;
    return true;
}

bool kv_prefix_block_listed(const kv_cache *kv, int32_t b)
{
    const kv_prefix *p = kv->prefix;
    return p != NULL && p->serial[b] != 0;
}

bool kv_prefix_block_idle(const kv_cache *kv, int32_t b)
{
    const kv_prefix *p = kv->prefix;
    return p != NULL && p->serial[b] != 0 && kv->refcount[b] == 1;
}

bool kv_prefix_evict_block(kv_cache *kv, int32_t b)
{
    kv_prefix *p = kv->prefix;
    if (!kv_prefix_block_idle(kv, b)) return false;
    lru_unlink(p, b);
    index_remove(kv, b);
    kv->refcount[b] = 0;
    kv_block_free(kv, b);
    p->evictions++;
    return true;
}

void kv_prefix_on_unref(kv_cache *kv, int32_t b)
{
    kv_prefix *p = kv->prefix;
    if (p == NULL || p->serial[b] == 0) return;
    /* the newest end: evicted last */
    p->lru_prev[b] = p->lru_new;
    p->lru_next[b] = -1;
    if (p->lru_new >= 0) p->lru_next[p->lru_new] = b;
    else p->lru_old = b;
    p->lru_new = b;
    p->n_idle++;
    while (p->n_idle > p->max_idle) kv_prefix_evict_one(kv);
}

/* Takes one more reference to listed block b for a sequence. */
static void block_ref(kv_cache *kv, int32_t b)
{
    if (kv->refcount[b] == 1) lru_unlink(kv->prefix, b); /* it was idle */
    kv->refcount[b]++;
}

/* ---- sequences ---- */

static void pub_reset(kv_prefix *p, int32_t seq_id)
{
    p->n_pub[seq_id] = 0;
    p->pub_hash[seq_id] = CHAINHASH_ROOT;
    p->pub_serial[seq_id] = 0;
}

void kv_prefix_on_truncate(kv_cache *kv, int32_t seq_id, int64_t n_pos)
{
    kv_prefix *p = kv->prefix;
    if (p == NULL) return;
    /* The cursor's chain is recomputed from position 0 at the next
     * publish: cheaper to keep than per-block hashes, and rare (only
     * kv_seq_reuse_prefix and sequences' ends cut into published blocks). */
    if ((int64_t)p->n_pub[seq_id] * kv->block_tokens > n_pos) pub_reset(p, seq_id);
}

int64_t kv_prefix_match(const kv_cache *kv, const int32_t *tokens, int64_t n)
{
    if (kv->prefix == NULL) return 0;
    const int bt = kv->block_tokens;
    uint64_t hash = CHAINHASH_ROOT, parent = 0;
    int64_t i = 0;
    for (; (i + 1) * bt <= n && i < kv->n_blocks; i++) {
        hash = chainhash_block(hash, tokens + i * bt, (size_t)bt);
        int32_t b = index_find(kv, hash, parent, tokens + i * bt);
        if (b < 0) break;
        parent = kv->prefix->serial[b];
        kv->prefix->chain[i] = b;
    }
    int32_t lo_b;
    return (int64_t)window_usable(kv, kv->prefix->chain, (int32_t)i, n, &lo_b) * bt;
}

/* Block idx of the sequence is listed (and maybe held by others) and the
 * sequence is to write into it: gives the sequence a private copy, or
 * takes the block out of the index when no block is free and nobody else
 * holds it. STRATA_ERANGE when neither is possible (nothing changes). */
static int make_private(kv_cache *kv, kv_seq *s, int32_t idx, strata_err *err)
{
    kv_prefix *p = kv->prefix;
    int32_t b = s->blocks[idx];
    /* the window block of the same positions, shared with the index (and
     * maybe others): a free one to copy into must exist before anything
     * changes */
    const bool w_shared = kv->layer_swa != NULL && idx >= s->w_lo && idx < s->w_end &&
                          kv->w_refcount[s->w_blocks[idx]] > 1;
    if (w_shared && kv->w_n_free == 0) kv_prefix_evict_windows(kv, 1);
    if (w_shared && kv->w_n_free == 0) {
        return strata_err_set(err, STRATA_ERANGE, "prefix cache: no window block free to copy into");
    }
    if (w_shared) {
        int32_t ow = s->w_blocks[idx], nw = kv_window_alloc(kv);
        for (int64_t l = 0; l < kv->n_layer; l++) {
            if (!kv->layer_swa[l]) continue;
            memcpy(kv_k_block(kv, l, nw, 0), kv_k_block(kv, l, ow, 0), kv->k_block_bytes);
            memcpy(kv_v_block(kv, l, nw, 0), kv_v_block(kv, l, ow, 0), kv->v_block_bytes);
        }
        s->w_blocks[idx] = nw;
        kv_window_unref(kv, ow); /* the index still holds it */
    }
    if (kv->n_free == 0) kv_prefix_evict_one(kv); /* b is held, so never b */
    if (kv->n_free > 0) {
        int32_t nb = kv_block_alloc(kv);
        for (int64_t l = 0; l < kv->n_layer; l++) {
            if (kv->layer_swa != NULL && kv->layer_swa[l]) continue; /* the window pool's */
            memcpy(kv_k_block(kv, l, nb, 0), kv_k_block(kv, l, b, 0), kv->k_block_bytes);
            memcpy(kv_v_block(kv, l, nb, 0), kv_v_block(kv, l, b, 0), kv->v_block_bytes);
        }
        kv->refcount[nb] = 1;
        s->blocks[idx] = nb;
        /* the index still holds b, so the count stays >= 1 */
        if (--kv->refcount[b] == 1) kv_prefix_on_unref(kv, b);
        return 0;
    }
    if (kv->refcount[b] == 2 && p->serial[b] != 0) {
        index_remove(kv, b);
        kv->refcount[b] = 1;
        return 0;
    }
    return strata_err_set(err, STRATA_ERANGE, "prefix cache: no block free to copy into");
}

int kv_seq_reuse_prefix(kv_cache *kv, int32_t seq_id, const int32_t *tokens, int64_t n,
                        int64_t min_tokens, int64_t *n_reused, strata_err *err)
{
    *n_reused = 0;
    if (seq_id < 0 || seq_id >= kv->n_seq_max || !kv->seqs[seq_id].active ||
        kv->seqs[seq_id].n_pos != 0 || kv->seqs[seq_id].n_blocks != 0) {
        return strata_err_set(err, STRATA_EINVAL,
                              "prefix cache: sequence %" PRId32 " is not active and empty",
                              seq_id);
    }
    kv_prefix *p = kv->prefix;
    if (p == NULL || n <= 0) return 0;
    kv_seq *s = &kv->seqs[seq_id];
    const int bt = kv->block_tokens;
    p->lookup_tokens += n;
    /* the chain, by reference, block by block from position 0; the cursor
     * before the last block is kept in case that block must be copied */
    uint64_t hash = CHAINHASH_ROOT, parent = 0, prev_hash = hash, prev_parent = 0;
    while ((int64_t)(s->n_blocks + 1) * bt <= n && s->n_blocks < kv->max_blocks_per_seq) {
        const int32_t *t = tokens + (int64_t)s->n_blocks * bt;
        uint64_t h = chainhash_block(hash, t, (size_t)bt);
        int32_t b = index_find(kv, h, parent, t);
        if (b < 0) break;
        block_ref(kv, b);
        s->blocks[s->n_blocks++] = b;
        prev_hash = hash;
        prev_parent = parent;
        hash = h;
        parent = p->serial[b];
    }
    if (kv->layer_swa != NULL) {
        /* window layers: only as far as the index keeps the window of the
         * reuse's end; that window is shared, the blocks before it unused */
        int32_t lo_b, k = window_usable(kv, s->blocks, s->n_blocks, n, &lo_b);
        if (k < s->n_blocks) {
            s->n_pos = (int64_t)s->n_blocks * bt;
            kv_seq_truncate(kv, seq_id, (int64_t)k * bt);
            hash = CHAINHASH_ROOT;
            parent = prev_parent = 0;
            prev_hash = hash;
            for (int32_t i = 0; i < k; i++) {
                prev_hash = hash;
                prev_parent = parent;
                hash = chainhash_block(hash, tokens + (int64_t)i * bt, (size_t)bt);
                parent = p->serial[s->blocks[i]];
            }
        }
        for (int32_t i = lo_b; i < k; i++) {
            s->w_blocks[i] = p->w_of[s->blocks[i]];
            kv->w_refcount[s->w_blocks[i]]++;
        }
        s->w_lo = lo_b;
        s->w_end = k > lo_b ? k : lo_b;
    }
    int64_t matched = (int64_t)s->n_blocks * bt;
    s->n_pos = matched;
    p->n_pub[seq_id] = s->n_blocks;
    p->pub_hash[seq_id] = hash;
    p->pub_serial[seq_id] = parent;
    if (matched > 0 && matched == n) {
        /* the last token is computed again, into the last block */
        strata_err cow_err;
        if (make_private(kv, s, s->n_blocks - 1, &cow_err) == 0) {
            s->n_pos = n - 1;
        } else {
            kv_seq_truncate(kv, seq_id, matched - bt);
        }
        p->n_pub[seq_id] = (int32_t)((matched - bt) / bt);
        p->pub_hash[seq_id] = prev_hash;
        p->pub_serial[seq_id] = prev_parent;
    }
    int64_t reused = s->n_pos;
    if (reused < min_tokens || reused <= 0) {
        kv_seq_truncate(kv, seq_id, 0);
        pub_reset(p, seq_id);
        return 0;
    }
    p->hit_tokens += reused;
    *n_reused = reused;
    return 0;
}

/* The index keeps the sequence's window block i for its listed block i,
 * while the sequence holds one (kv_seq_window_advance lets go of it when
 * the sequence moves past: only a chain's end keeps its window). */
static void window_attach(kv_cache *kv, const kv_seq *s, int64_t i)
{
    kv_prefix *p = kv->prefix;
    int32_t b = s->blocks[i];
    if (kv->layer_swa == NULL || p->w_of[b] >= 0 || i < s->w_lo || i >= s->w_end) return;
    p->w_of[b] = s->w_blocks[i];
    kv->w_refcount[p->w_of[b]]++;
}

void kv_prefix_publish(kv_cache *kv, int32_t seq_id, const int32_t *tokens)
{
    kv_prefix *p = kv->prefix;
    if (p == NULL || seq_id < 0 || seq_id >= kv->n_seq_max || !kv->seqs[seq_id].active) return;
    const kv_seq *s = &kv->seqs[seq_id];
    const int bt = kv->block_tokens;
    int64_t full = s->n_pos / bt;
    uint64_t hash = p->pub_hash[seq_id], parent = p->pub_serial[seq_id];
    for (int64_t i = p->n_pub[seq_id]; i < full; i++) {
        const int32_t *t = tokens + i * bt;
        uint64_t h = chainhash_block(hash, t, (size_t)bt);
        int32_t b = s->blocks[i];
        if (p->serial[b] != 0) {
            /* taken from the cache (or published by this sequence before
             * its cursor was reset): the same entry */
            assert(p->hash[b] == h && p->parent[b] == parent);
            parent = p->serial[b];
            window_attach(kv, s, i);
        } else {
            int32_t other = index_find(kv, h, parent, t);
            if (other >= 0) {
                /* computed by another sequence meanwhile: that entry
                 * stands, and this block stays private */
                parent = p->serial[other];
            } else {
                index_insert(kv, b, h, parent, t);
                parent = p->serial[b];
                window_attach(kv, s, i);
            }
        }
        hash = h;
        p->n_pub[seq_id] = (int32_t)(i + 1);
        p->pub_hash[seq_id] = hash;
        p->pub_serial[seq_id] = parent;
    }
}
