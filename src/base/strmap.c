/* Open-addressing hash index of byte strings (see strmap.h). */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t strata_hash_bytes(const char *key, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 1099511628211ULL;
    }
    return h;
}

int strata_strmap_init(strata_strmap *m, size_t n_keys)
{
    m->n = 0;
    m->cap = 16;
    if (n_keys > (SIZE_MAX / sizeof(strata_strmap_slot)) / 4) return -1;
    while (m->cap < n_keys * 2) m->cap *= 2;
    m->slots = calloc(m->cap, sizeof(*m->slots));
    if (m->slots == NULL) {
        m->cap = 0;
        return -1;
    }
    return 0;
}

void strata_strmap_free(strata_strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->n = 0;
}

int strata_strmap_put(strata_strmap *m, const char *key, size_t len, int64_t value,
                      int64_t *existing)
{
    if (m->n + 1 > m->cap / 2 + m->cap / 4) return -1; /* keep probes short */
    size_t mask = m->cap - 1;
    size_t i = (size_t)strata_hash_bytes(key, len) & mask;
    for (;;) {
        strata_strmap_slot *s = &m->slots[i];
        if (s->key == NULL) {
            s->key = key;
            s->len = len;
            s->value = value;
            m->n++;
            return 0;
        }
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            if (existing != NULL) *existing = s->value;
            return 1;
        }
        i = (i + 1) & mask;
    }
}

int64_t strata_strmap_get(const strata_strmap *m, const char *key, size_t len)
{
    if (m->cap == 0) return -1;
    size_t mask = m->cap - 1;
    size_t i = (size_t)strata_hash_bytes(key, len) & mask;
    for (;;) {
        const strata_strmap_slot *s = &m->slots[i];
        if (s->key == NULL) return -1;
        if (s->len == len && memcmp(s->key, key, len) == 0) return s->value;
        i = (i + 1) & mask;
    }
}
