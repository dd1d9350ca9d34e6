/* A fixed-capacity hash index from byte strings to integers.
 *
 * Keys are (pointer, length) pairs that the caller keeps alive for the life
 * of the map (typically they point into a mapped file); the map stores only
 * the pointers. Capacity is fixed at init from the number of keys expected,
 * so inserting never reallocates. Used for duplicate detection and lookup of
 * GGUF keys and tensor names. */
#ifndef STRATA_BASE_STRMAP_H
#define STRATA_BASE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct strata_strmap_slot {
    const char *key; /* NULL: empty */
    size_t len;
    int64_t value;
} strata_strmap_slot;

typedef struct strata_strmap {
    strata_strmap_slot *slots;
    size_t cap; /* a power of two, at least twice the expected keys */
    size_t n;
} strata_strmap;

/* Prepares room for n_keys keys. Returns 0, or -1 when memory runs out or
 * n_keys is absurdly large. */
int strata_strmap_init(strata_strmap *m, size_t n_keys);
void strata_strmap_free(strata_strmap *m);

/* Inserts key -> value. Returns 0 when inserted, 1 when the key was already
 * present (its value is left unchanged and written to *existing when that is
 * not NULL), -1 when the map is full. */
int strata_strmap_put(strata_strmap *m, const char *key, size_t len, int64_t value,
                      int64_t *existing);

/* FNV-1a, 64-bit, of len bytes: simple and adequate for short keys; the
 * hash this index uses, for other tables of byte strings. */
uint64_t strata_hash_bytes(const char *key, size_t len);

/* Returns the value for key, or -1 when absent. */
int64_t strata_strmap_get(const strata_strmap *m, const char *key, size_t len);

#endif
