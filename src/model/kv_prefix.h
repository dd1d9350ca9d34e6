/* The prefix cache of the KV pool: full blocks indexed by the chain hash of
 * the tokens they hold (base/chainhash.h), shared by reference between
 * sequences whose prompts start alike, and kept after their sequences end
 * until the pool needs the room.
 *
 * Entries. A published block holds the KV rows of positions
 * [i * block_tokens, (i+1) * block_tokens) of a sequence whose tokens from
 * position 0 are known; its entry is (hash, parent, tokens) where hash is
 * the chain hash of the prefix up to and including the block, and parent
 * the serial number of the entry of block i-1 (0 for block 0). A lookup
 * walks a prompt block by block from position 0 and takes an entry only
 * when the hash, the parent entry and all block_tokens token ids match, so
 * a hash collision can never hand out another prompt's rows: each entry's
 * tokens are compared and its parent is an identity, not a hash. Serial
 * numbers are never reused, so an entry whose parent was evicted (and
 * whose block id went to other tokens) is unreachable, never wrong.
 *
 * References. The index holds one reference to each block it lists, so a
 * block with refcount > 1 is read-only for every holder (kv_cache.h) and a
 * listed block held by no sequence has refcount 1: it is *idle*, in an LRU
 * list. Idle blocks count as free (kv_free_blocks): taking a block takes
 * a free one first and evicts the least recently idle one only when none
 * is left; at most max_idle blocks stay idle (the cache's budget), older
 * ones are evicted at once. A sequence ending releases its blocks last to
 * first, so a chain's later blocks go idle, and are evicted, before its
 * first ones.
 *
 * Exactness. Positions are absolute from 0 and the forward pass reads a
 * sequence's keys and values back from the cache whether it wrote them in
 * this batch or another (attention.h), so a sequence that starts from
 * cached blocks computes bit for bit what it would have computed cold.
 * Only causal models may publish (every architecture of model.h is).
 *
 * Sliding windows. With window layers (kv_cache.h) a sequence can go on
 * from a cached prefix of length L only if the window layers' rows of
 * L - n_swa + 1 .. L - 1 are still held. The main pool's blocks are
 * published as above; with each, the index also keeps the window block of
 * the same positions, but only while the publishing sequence holds it:
 * when the sequence moves past a block (kv_seq_window_advance gives the
 * block back), the index lets go of it too. So the index keeps the window
 * of each chain's end, where a sequence ended or was preempted: what a
 * resent conversation (the next turn) or a resumed sequence needs, at the
 * cost of one window per chain end, and nothing for a running sequence.
 * A lookup reuses the longest chain prefix whose end has its window kept
 * (often all or nothing); a shared system prompt followed by different
 * questions is recomputed, since its end's window went when its first
 * sequence moved on. The kept windows give way, idle chains' first, when
 * a sequence needs a window block and none is free (their main blocks
 * stay listed, usable for nothing but longer chains whose ends still have
 * windows).
 *
 * Threads: as kv_cache (the owner thread only). */
#ifndef STRATA_MODEL_KV_PREFIX_H
#define STRATA_MODEL_KV_PREFIX_H

#include "base/err.h"
#include "model/kv_cache.h"

#include <stdint.h>

typedef struct kv_prefix kv_prefix;

/* Turns the prefix cache on for kv, with at most max_idle_blocks idle
 * blocks (< 0: the whole pool; 0: blocks are shared only while some
 * sequence holds them). Call before any sequence is active, once.
 * Errors: STRATA_EINVAL (a sequence is active, or already on),
 * STRATA_ENOMEM. */
int kv_prefix_enable(kv_cache *kv, int32_t max_idle_blocks, strata_err *err);

bool kv_prefix_enabled(const kv_cache *kv);

/* The prompt tokens that a lookup of tokens[0, n) would find cached (a
 * multiple of block_tokens; 0 when the cache is off). Changes nothing. */
int64_t kv_prefix_match(const kv_cache *kv, const int32_t *tokens, int64_t n);

/* Starts the empty active sequence seq_id from the longest chain of cached
 * full blocks of tokens[0, n), by reference, and sets its length to the
 * tokens it reuses, *n_reused, which is at most n - 1: the caller always
 * computes the last prompt token (for its logits). When the chain covers
 * all n tokens, the last block is copied (copy on write: position n - 1 is
 * written again) or, when no block is free and only the index shares it,
 * taken out of the index; failing both, one block fewer is reused. A
 * reuse of fewer than min_tokens tokens reuses none. Counts n lookup
 * tokens and *n_reused hit tokens. Errors: STRATA_EINVAL when seq_id is
 * not active or not empty (nothing changes). Off: *n_reused = 0. */
int kv_seq_reuse_prefix(kv_cache *kv, int32_t seq_id, const int32_t *tokens, int64_t n,
                        int64_t min_tokens, int64_t *n_reused, strata_err *err);

/* Publishes the full blocks of sequence seq_id not yet published, whose
 * tokens from position 0 are tokens[0, kv_seq_len) (the caller's record of
 * what it fed). A block whose tokens and chain are already listed under
 * another block stays private. Call after the rows are written (after the
 * forward pass); cheap when no new block is full. Off or inactive: no-op.
 * The caller must not rewrite positions of a published block (truncating
 * into one then writing): kv_seq_reuse_prefix is the one path that
 * rewrites a cached position, and it copies the block first;
 * model_forward refuses such a write (kv_seq_check_writable). */
void kv_prefix_publish(kv_cache *kv, int32_t seq_id, const int32_t *tokens);

typedef struct kv_prefix_stats {
    int32_t blocks_cached;   /* listed in the index (held or idle) */
    int32_t blocks_idle;     /* listed and held by no sequence */
    int32_t max_idle;        /* the budget */
    int64_t lookup_tokens;   /* prompt tokens looked up, in all */
    int64_t hit_tokens;      /* of them reused */
    int64_t evictions;       /* idle blocks evicted */
} kv_prefix_stats;

/* Zeroes when the cache is off. */
void kv_prefix_get_stats(const kv_cache *kv, kv_prefix_stats *out);

/* ---- for kv_cache.c only ---- */
void kv_prefix_destroy(kv_prefix *p);
/* The block's refcount just dropped to 1: idle when listed. */
void kv_prefix_on_unref(kv_cache *kv, int32_t block);
/* Frees the least recently idle block (pushes it on the free list);
 * false when none is idle. */
bool kv_prefix_evict_one(kv_cache *kv);
int32_t kv_prefix_n_idle(const kv_cache *kv);
/* Whether block b is listed in the index (held or idle). */
bool kv_prefix_block_listed(const kv_cache *kv, int32_t b);
/* Whether block b is idle (listed, held by no sequence). */
bool kv_prefix_block_idle(const kv_cache *kv, int32_t b);
/* Evicts block b if it is idle (the elastic pool emptying a step); false
 * otherwise. */
bool kv_prefix_evict_block(kv_cache *kv, int32_t b);
/* Sequence seq's window block wb of listed block b goes out of its window:
 * the index lets go of it too, if it keeps it. */
void kv_prefix_on_window_drop(kv_cache *kv, int32_t b, int32_t wb);
/* Frees up to n window blocks that only the index holds; returns how many. */
int32_t kv_prefix_evict_windows(kv_cache *kv, int32_t n);
/* Sequence seq_id was cut to n_pos positions. */
void kv_prefix_on_truncate(kv_cache *kv, int32_t seq_id, int64_t n_pos);

#endif
