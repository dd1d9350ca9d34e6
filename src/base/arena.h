/* A bump allocator: many small allocations freed all at once.
 *
 * Used for data whose lifetime is one object's (a parsed GGUF's key and
 * tensor tables). Memory is zeroed. Allocations are aligned to 16 bytes. */
#ifndef STRATA_BASE_ARENA_H
#define STRATA_BASE_ARENA_H

#include <stddef.h>

typedef struct strata_arena_chunk strata_arena_chunk;

typedef struct strata_arena {
    strata_arena_chunk *head;
    size_t n_bytes; /* total bytes handed out, for accounting and tests */
} strata_arena;

void strata_arena_init(strata_arena *a);

/* Returns n zeroed bytes that live until strata_arena_free, or NULL when n
 * overflows or memory runs out. n == 0 returns a valid unique pointer. */
void *strata_arena_alloc(strata_arena *a, size_t n);

/* Allocates count * size bytes, checking the product for overflow. */
void *strata_arena_calloc(strata_arena *a, size_t count, size_t size);

void strata_arena_free(strata_arena *a);

#endif
