/* A set of request ids (integers >= 0) for the engine loop's live-id table
 * (engine_loop.c "Live ids"): open addressing with linear probing, at most
 * half full so that probes stay short, and deletion by shifting the rest of
 * a probe run back (no tombstones, so a set that sees millions of requests
 * never degrades). Header-only; not thread-safe (the caller locks). */
#ifndef STRATA_ENGINE_IDSET_H
#define STRATA_ENGINE_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct idset {
    int64_t *v;               /* (cap) members; -1: an empty cell */
    size_t cap, n;            /* cap a power of two, or 0 */
} idset;

static inline size_t idset_home(const idset *s, int64_t id)
{
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ULL; /* Fibonacci hashing */
    return (size_t)(h >> 32) & (s->cap - 1);
}

/* Whether id (>= 0) is a member. */
static inline bool idset_has(const idset *s, int64_t id)
{
    if (s->cap == 0) return false;
    for (size_t i = idset_home(s, id);; i = (i + 1) & (s->cap - 1)) {
        if (s->v[i] == id) return true;
        if (s->v[i] < 0) return false; /* a run ends at an empty cell; one always exists */
    }
}

/* Adds id (>= 0; a member already: nothing). 0, or -1 when out of memory
 * (the set is unchanged). */
static inline int idset_add(idset *s, int64_t id)
{
    if (idset_has(s, id)) return 0;
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        int64_t *v = malloc(cap * sizeof(*v));
        if (v == NULL) return -1;
        for (size_t i = 0; i < cap; i++) v[i] = -1;
        idset old = *s;
        s->v = v;
        s->cap = cap;
        for (size_t i = 0; i < old.cap; i++) {
            if (old.v[i] < 0) continue;
            size_t j = idset_home(s, old.v[i]);
            while (s->v[j] >= 0) j = (j + 1) & (cap - 1);
            s->v[j] = old.v[i];
        }
        free(old.v);
    }
    size_t j = idset_home(s, id);
    while (s->v[j] >= 0) j = (j + 1) & (s->cap - 1);
    s->v[j] = id;
    s->n++;
    return 0;
}

/* Removes id if it is a member. Every later member of its probe run whose
 * home is not cyclically in (hole, its cell] moves back into the hole, so no
 * lookup ever stops early at it. */
static inline void idset_del(idset *s, int64_t id)
{
    if (s->cap == 0) return;
    size_t mask = s->cap - 1, i = idset_home(s, id);
    while (s->v[i] != id) {
        if (s->v[i] < 0) return;
        i = (i + 1) & mask;
    }
    s->v[i] = -1;
    s->n--;
    for (size_t j = (i + 1) & mask; s->v[j] >= 0; j = (j + 1) & mask) {
        size_t home = idset_home(s, s->v[j]);
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        s->v[i] = s->v[j];
        s->v[j] = -1;
        i = j;
    }
}

/* Frees the cells; the set is empty (and usable) again. */
static inline void idset_free(idset *s)
{
    free(s->v);
    *s = (idset){0};
}

#endif
