/* Prefix-aware routing's index and choice (route_prefix.h). */
#include "serve/route_prefix.h"

#include "base/chainhash.h"

#include <stdlib.h>
#include <string.h>

static uint64_t key_of(uint64_t h)
{
    return h != 0 ? h : 1; /* 0 marks an empty bucket */
}

int route_index_init(route_index *ix, size_t max)
{
    memset(ix, 0, sizeof(*ix));
    if (max < 2) max = 2;
    size_t cap = 4;
    while (cap < 2 * max) cap *= 2;
    ix->keys = calloc(cap, sizeof(uint64_t));
    ix->ticks = calloc(cap, sizeof(uint64_t));
    if (ix->keys == NULL || ix->ticks == NULL) {
        route_index_free(ix);
        return -1;
    }
    ix->cap = cap;
    ix->max = max;
    return 0;
}

void route_index_free(route_index *ix)
{
    free(ix->keys);
    free(ix->ticks);
    memset(ix, 0, sizeof(*ix));
}

void route_index_clear(route_index *ix)
{
    if (ix->cap == 0) return;
    memset(ix->keys, 0, ix->cap * sizeof(uint64_t));
    memset(ix->ticks, 0, ix->cap * sizeof(uint64_t));
    ix->n = 0;
}

static size_t slot_of(const route_index *ix, uint64_t k)
{
    size_t i = (size_t)(k ^ (k >> 29)) & (ix->cap - 1);
    while (ix->keys[i] != 0 && ix->keys[i] != k) i = (i + 1) & (ix->cap - 1);
    return i;
}

static void put(route_index *ix, uint64_t k, uint64_t tick)
{
    size_t i = slot_of(ix, k);
    if (ix->keys[i] == 0) ix->n++;
    ix->keys[i] = k;
    ix->ticks[i] = tick;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Keeps the most recently sent half (ties at the median kept), rebuilt in
 * place from a copy. */
static void age(route_index *ix)
{
    size_t n = 0;
    uint64_t *t = malloc(ix->n * sizeof(uint64_t));
    uint64_t *k = malloc(ix->cap * sizeof(uint64_t));
    uint64_t *kt = malloc(ix->cap * sizeof(uint64_t));
    if (t == NULL || k == NULL || kt == NULL) {
        /* no memory to age: forget everything, which is always correct */
        route_index_clear(ix);
        free(t), free(k), free(kt);
        return;
    }
    for (size_t i = 0; i < ix->cap; i++) {
        if (ix->keys[i] != 0) t[n++] = ix->ticks[i];
    }
    qsort(t, n, sizeof(uint64_t), cmp_u64);
    uint64_t keep_from = t[n / 2];
    memcpy(k, ix->keys, ix->cap * sizeof(uint64_t));
    memcpy(kt, ix->ticks, ix->cap * sizeof(uint64_t));
    route_index_clear(ix);
    for (size_t i = 0; i < ix->cap; i++) {
        if (k[i] != 0 && kt[i] >= keep_from) put(ix, k[i], kt[i]);
    }
    free(t), free(k), free(kt);
}

void route_index_touch(route_index *ix, uint64_t h, uint64_t tick)
{
    if (ix->cap == 0) return;
    uint64_t k = key_of(h);
    size_t i = slot_of(ix, k);
    if (ix->keys[i] == k) {
        ix->ticks[i] = tick;
        return;
    }
    if (ix->n >= ix->max) age(ix);
    put(ix, k, tick);
}

bool route_index_has(const route_index *ix, uint64_t h)
{
    if (ix->cap == 0) return false;
    uint64_t k = key_of(h);
    return ix->keys[slot_of(ix, k)] == k;
}

size_t route_prompt_hashes(const int32_t *toks, size_t n, int64_t block_tokens, uint64_t *out,
                           size_t max)
{
    if (block_tokens <= 0) return 0;
    size_t bt = (size_t)block_tokens, k = 0;
    uint64_t h = CHAINHASH_ROOT;
    for (size_t i = 0; i + bt <= n && k < max; i += bt) {
        h = chainhash_block(h, toks + i, bt);
        out[k++] = h;
    }
    return k;
}

int64_t route_expected_cached(const route_index *ix, const uint64_t *hashes, size_t n_hashes,
                              int64_t block_tokens, int64_t n_prompt)
{
    size_t k = 0;
    while (k < n_hashes && route_index_has(ix, hashes[k])) k++;
    int64_t t = (int64_t)k * block_tokens;
    if (t > n_prompt - 1) t = n_prompt - 1;
    return t > 0 ? t : 0;
}

/* a better than b on load: lighter, then more free slots (the caller scans
 * from start, so an exact tie keeps the first seen) */
static bool lighter(const route_cand *a, const route_cand *b)
{
    if (a->load != b->load) return a->load < b->load;
    return a->free > b->free;
}

int route_choose(const route_cand *c, int n, int balance, int start, bool may_wait,
                 enum route_reason *why)
{
    int least = -1;      /* the least loaded ready replica: the balance's reference */
    int least_free = -1; /* the least loaded one with a free slot */
    if (start < 0 || start >= n) start = 0;
    for (int j = 0; j < n; j++) {
        int i = (start + j) % n;
        if (!c[i].ready) continue;
        if (least < 0 || lighter(&c[i], &c[least])) least = i;
        if (c[i].free > 0 && (least_free < 0 || lighter(&c[i], &c[least_free]))) least_free = i;
    }
    *why = ROUTE_LOAD;
    if (least < 0) return -1;
    int best = -1;       /* longest prefix within the balance */
    bool any_prefix = false;
    for (int j = 0; j < n; j++) {
        int i = (start + j) % n;
        if (!c[i].ready || c[i].expected <= 0) continue;
        any_prefix = true;
        if (c[i].load - c[least].load > balance) continue;
        if (!may_wait && c[i].free <= 0) continue;
        if (best < 0 || c[i].expected > c[best].expected ||
            (c[i].expected == c[best].expected && lighter(&c[i], &c[best]))) {
            best = i;
        }
    }
    if (best >= 0) {
        *why = ROUTE_PREFIX;
        return best;
    }
    *why = any_prefix ? ROUTE_BALANCE : ROUTE_LOAD;
    return least_free;
}
