/* Bump allocator over a list of chunks (see arena.h). */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>

#define ARENA_ALIGN 16
#define ARENA_CHUNK_MIN (64 * 1024)

struct strata_arena_chunk {
    strata_arena_chunk *next;
    size_t cap;  /* bytes in data[] */
    size_t used; /* bytes of data[] handed out */
    _Alignas(ARENA_ALIGN) unsigned char data[];
};

void strata_arena_init(strata_arena *a)
{
    a->head = NULL;
    a->n_bytes = 0;
}

void *strata_arena_alloc(strata_arena *a, size_t n)
{
    if (n > SIZE_MAX / 2) return NULL;
    size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;

    strata_arena_chunk *c = a->head;
    if (c == NULL || c->cap - c->used < need) {
        size_t cap = need > ARENA_CHUNK_MIN ? need : ARENA_CHUNK_MIN;
        c = calloc(1, sizeof(*c) + cap);
        if (c == NULL) return NULL;
        c->cap = cap;
        c->used = 0;
        /* A large one-off block goes behind the current head so the head's
         * free space stays usable for later small allocations. */
        if (a->head != NULL && cap == need && need > ARENA_CHUNK_MIN) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += need;
    a->n_bytes += need;
    return p;
}

void *strata_arena_calloc(strata_arena *a, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    return strata_arena_alloc(a, count * size);
}

void strata_arena_free(strata_arena *a)
{
    strata_arena_chunk *c = a->head;
    while (c != NULL) {
        strata_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->n_bytes = 0;
}
