/* The chain hash of the prefix cache: a 64-bit hash of a block of token ids
 * chained to the hash of the block before it, so that the hash of block i
 * names the whole prefix [0, (i+1) * block_tokens) and not just the block.
 *
 *   h_0 = CHAINHASH_ROOT
 *   h_{i+1} = chainhash_block(h_i, tokens of block i)
 *
 * It has no dependency on models so that the server can compute the same
 * hashes (to route a request to the replica that holds its prefix) from
 * the token ids alone. The definition is part of the contract: FNV-1a over
 * the parent hash's 8 bytes, then the block's length, then each token id's
 * 4 bytes (all little-endian), finished with splitmix64's mixer so that
 * nearby inputs spread over the whole word. A hash is only a pointer into
 * an index: whoever finds an entry by hash still compares the tokens. */
#ifndef STRATA_BASE_CHAINHASH_H
#define STRATA_BASE_CHAINHASH_H

#include <stddef.h>
#include <stdint.h>

#define CHAINHASH_ROOT ((uint64_t)0x5374726174610001ULL) /* "Strata", version 1 */

static inline uint64_t chainhash_fnv_u64(uint64_t h, uint64_t v, int n_bytes)
{
    for (int i = 0; i < n_bytes; i++) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ULL; /* the 64-bit FNV prime */
    }
    return h;
}

/* The hash of a block of n token ids following a prefix whose hash is
 * parent. */
static inline uint64_t chainhash_block(uint64_t parent, const int32_t *tokens, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* the 64-bit FNV offset basis */
    h = chainhash_fnv_u64(h, parent, 8);
    h = chainhash_fnv_u64(h, (uint64_t)n, 8);
    for (size_t i = 0; i < n; i++) h = chainhash_fnv_u64(h, (uint32_t)tokens[i], 4);
    /* splitmix64's finaliser */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

#endif
