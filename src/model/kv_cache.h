/* The KV cache: keys and values of every layer for the positions each
 * sequence has seen, in fixed-size blocks of KV_BLOCK_TOKENS positions.
 *
 * Storage. One pool of n_blocks blocks, reserved once at kv_cache_init
 * (see "Memory" for when it costs memory) and sized from the positions
 * asked for (never from the model's training context). A block holds, for every layer and KV head, block_tokens rows
 * of keys and of values; within a (layer, block, KV head) the rows of
 * consecutive positions are contiguous, so attention streams one block as
 * one (block_tokens, head_dim) matrix. Key rows are of type k_type and
 * value rows of v_type, each F16 or Q8_0 (GGUF's block layout: per 32
 * elements an f16 scale and 32 int8 codes); the row strides come from the
 * types, so callers only see bytes (kv_k_row/kv_v_row hand out rows of
 * k_type / v_type). Q8_0 needs the row's head size to be a multiple of
 * 32.
 *
 * Sequences. A sequence is a slot id in [0, n_seq_max). Its block table
 * maps position p to block table[p / block_tokens], row p % block_tokens;
 * blocks are taken from a free list as the sequence grows and returned
 * when it shrinks or ends. Each slot's table (room for every block of the
 * pool) is allocated at init, so starting, growing and ending a sequence
 * allocates no memory.
 *
 * Blocks carry a reference count so that the prefix cache (kv_prefix.h)
 * can share a full block between sequences: a block with count > 1 is
 * read-only (the index's own reference counts, so a cached block is
 * read-only even to its one sequence); a writer copies it first. With the
 * prefix cache on, unreferenced cached blocks count as free and are
 * evicted, least recently used first, when a sequence needs a block and
 * the free list is empty.
 *
 * Memory (elastic or resident). The pool's keys and values are one
 * anonymous mapping each, reserved for the whole pool (MAP_NORESERVE), so
 * a page costs memory only once a block's rows are written. The free list
 * is a min-heap: the lowest free block id is taken first, so blocks in use
 * crowd into the low ids and high ones empty out. With kv_pool_set_elastic
 * the blocks are grouped in steps of step_blocks; a step none of whose
 * blocks has been held (refcount > 0) for hold_ms is given back to the
 * operating system by kv_pool_trim (madvise MADV_DONTNEED over its range
 * in every layer: the pages read as zeros when touched again, as fresh
 * ones), except the first resident_blocks' steps, never given back. A
 * step whose only held blocks are ones the prefix cache keeps (idle, held
 * by no sequence) for hold_ms, as kv_pool_trim sees it, has them evicted
 * and is given back too: the cache keeps what the resident steps hold, and
 * more only while memory is in use anyway. kv_pool_prefault
 * writes every page at once and turns trimming off: the resident profile.
 *
 * Sliding windows. A layer that attends through a window of n_swa
 * positions (gemma2/3, gpt-oss) never reads a key older than p - n_swa + 1
 * for a query at p, so its rows do not live in the pool above: they live
 * in a second, smaller pool, the window pool, with its own block ids and
 * free list, and each sequence has a second table (w_blocks) indexed by
 * the same block index as its main table. A window block is taken when
 * the forward pass reaches its positions (kv_seq_window_advance, per
 * chunk) and given back once it lies wholly before the earliest position
 * any later query can see: p_first - n_swa - swa_slack, p_first being the
 * first position the chunk writes. So a chunk's queries find the n_swa - 1
 * positions before the chunk's start, and a sequence holds at most
 * n_swa + swa_slack + (its last chunk) + 2 blocks' positions in the window
 * pool, however long it grows; the main pool holds only the layers that
 * see everything. The window pool has n_seq_max times that many blocks
 * (swa_batch is the longest chunk), capped at the main pool's size.
 * Truncating (speculative rollback) keeps working while the cut is no
 * more than swa_slack positions before the last chunk's start: the window
 * of the new end is still held (kv_seq_can_truncate says whether). A cut
 * further back empties the sequence (the caller re-feeds it).
 * Window blocks carry reference counts as main blocks do: the prefix
 * cache keeps the window of a published chain's end (kv_prefix.h,
 * "Sliding windows"), and a sequence that reuses the chain shares those
 * blocks read-only. Windows the cache keeps give way (are dropped, with
 * their chains staying listed) when a sequence needs a window block and
 * none is free.
 *
 * Threads: not thread-safe; the forward pass's owner thread calls the
 * mutating functions between passes, and worker threads only read rows
 * of blocks or write rows of positions no other thread writes. */
#ifndef STRATA_MODEL_KV_CACHE_H
#define STRATA_MODEL_KV_CACHE_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS 32

typedef struct kv_cache_params {
    int64_t n_layer;
    int64_t n_head_kv;
    int64_t head_dim;      /* per key row */
    int64_t head_dim_v;    /* per value row */
    int64_t n_ctx;         /* positions the pool holds in all (rounded up to blocks) */
    int n_seq_max;         /* sequence slots, >= 1 */
    int block_tokens;      /* 0: KV_BLOCK_TOKENS */
    uint32_t k_type;       /* STRATA_TYPE_F16 or STRATA_TYPE_Q8_0; 0 (F32, never a
                              KV type) means F16 */
    uint32_t v_type;       /* likewise for value rows */
    /* Sliding-window layers (see "Sliding windows"); all zero: none. */
    int64_t n_swa;            /* the window, in positions */
    const uint8_t *layer_swa; /* (n_layer) 1: the layer slides; NULL: none does */
    int64_t swa_slack;        /* positions of rollback past a chunk's start; 0: block_tokens */
    int64_t swa_batch;        /* the longest chunk the forward pass writes; 0: n_ctx */
} kv_cache_params;

typedef struct kv_seq {
    bool active;
    int64_t n_pos;         /* positions [0, n_pos) are held */
    int32_t n_blocks;      /* blocks in the table (covering >= n_pos positions) */
    int32_t *blocks;       /* (max_blocks_per_seq) block ids; first n_blocks valid */
    /* the window pool's table: entries [w_lo, w_end) hold window block ids,
     * the others -1; w_end <= n_blocks */
    int32_t *w_blocks;     /* (max_blocks_per_seq) */
    int32_t w_lo, w_end;
} kv_seq;

/* Read-only to callers: use the functions below to change it. */
typedef struct kv_cache {
    int64_t n_layer, n_head_kv, head_dim, head_dim_v;
    int block_tokens;
    uint32_t type;         /* k_type (kept for callers that knew one type) */
    uint32_t k_type;       /* STRATA_TYPE_F16 or STRATA_TYPE_Q8_0 */
    uint32_t v_type;
    size_t k_row_bytes;    /* bytes of one key row (head_dim elements) */
    size_t v_row_bytes;
    size_t k_block_bytes;  /* one (layer, block): n_head_kv * block_tokens key rows */
    size_t v_block_bytes;
    int32_t n_blocks;      /* in the pool */
    int32_t max_blocks_per_seq;
    uint8_t *k;            /* (n_layer, n_blocks, n_head_kv, block_tokens, head_dim) of type */
    uint8_t *v;            /* (n_layer, n_blocks, n_head_kv, block_tokens, head_dim_v) of type */
    int32_t *refcount;     /* (n_blocks) */
    int32_t *free_ids;     /* (n_blocks) min-heap of free block ids; first n_free valid */
    int32_t n_free;
    size_t k_map_bytes, v_map_bytes; /* the two mappings */
    /* elastic memory (kv_pool_set_elastic); step_blocks 0: never trimmed */
    int32_t step_blocks, n_steps, resident_steps;
    double hold_ms;
    int32_t *step_held;        /* (n_steps) blocks of the step with refcount > 0 */
    double *step_free_since;   /* (n_steps) ms when step_held last went to 0 */
    uint8_t *step_committed;   /* (n_steps) a block was taken since its last release */
    double *step_quiet_since;  /* (n_steps) ms since kv_pool_trim first saw the step hold
                                  only idle cached blocks; < 0: not so */
    int64_t n_trimmed;         /* steps given back since start */
    int n_seq_max;
    kv_seq *seqs;          /* (n_seq_max) */
    struct kv_prefix *prefix; /* the prefix cache's index (kv_prefix.h); NULL: off */
    /* sliding windows; layer_swa NULL when no layer slides */
    int64_t n_swa, swa_slack;
    int64_t n_layer_full, n_layer_swa; /* layers in the main pool / the window pool */
    uint8_t *layer_swa;    /* (n_layer) */
    int64_t *layer_slot;   /* (n_layer) the layer's index within its pool */
    int32_t w_n_blocks;    /* in the window pool */
    uint8_t *wk;           /* (n_layer_swa, w_n_blocks, n_head_kv, block_tokens, head_dim) */
    uint8_t *wv;
    int32_t *w_free_ids;   /* (w_n_blocks) min-heap of free window block ids */
    int32_t *w_refcount;   /* (w_n_blocks) holders: sequences and the prefix cache */
    int32_t w_n_free;
    size_t wk_map_bytes, wv_map_bytes;
} kv_cache;

/* Allocates the pool and the tables. *out is owned by the caller and freed
 * with kv_cache_free. Errors: STRATA_EINVAL for sizes that are not
 * positive or whose pool would not fit in memory, for a row type other
 * than F16 and Q8_0, and for Q8_0 with a head size that is not a multiple
 * of 32 (the message says which); STRATA_ENOMEM. */
int kv_cache_init(kv_cache **out, const kv_cache_params *p, strata_err *err);
void kv_cache_free(kv_cache *kv);

/* Bytes the pool for these parameters takes (0 when they are invalid),
 * the window pool included. */
size_t kv_cache_pool_bytes(const kv_cache_params *p);

/* Bytes of both pools of kv, and of one main-pool block (its full layers). */
size_t kv_cache_bytes(const kv_cache *kv);
size_t kv_main_block_bytes(const kv_cache *kv);

/* The row type a kv_cache_params field means (0 -> F16). */
uint32_t kv_type_resolve(uint32_t type);

/* Parses a KV row type name: "f16" or "q8_0" (case ignored). Returns 0
 * and sets *type, or STRATA_EINVAL with a message naming the choices. */
int kv_type_parse(const char *name, uint32_t *type, strata_err *err);

/* Starts sequence seq_id (empty). STRATA_EINVAL when seq_id is outside
 * [0, n_seq_max) or already active. */
int kv_seq_add(kv_cache *kv, int32_t seq_id, strata_err *err);

/* Ends a sequence and returns its blocks to the pool. An inactive or
 * out-of-range seq_id is ignored. */
void kv_seq_remove(kv_cache *kv, int32_t seq_id);

/* Keeps positions [0, n_pos) of an active sequence, releasing the blocks
 * past them; n_pos >= the current length does nothing. With window layers,
 * a cut below what kv_seq_can_truncate allows empties the sequence. */
void kv_seq_truncate(kv_cache *kv, int32_t seq_id, int64_t n_pos);

/* Whether the window layers still hold what a query at n_pos sees
 * (positions n_pos - n_swa + 1 ..), so that truncating to n_pos and going
 * on from there is exact. Always true without window layers. */
bool kv_seq_can_truncate(const kv_cache *kv, int32_t seq_id, int64_t n_pos);

/* The window pool's side of a chunk: releases the sequence's window
 * blocks wholly before p_first - n_swa - swa_slack and takes those that
 * positions up to p_end (<= its length) need. p_first is the first
 * position the chunk writes. No-op without window layers. STRATA_ERANGE
 * when the window pool is out of blocks (nothing taken). */
int kv_seq_window_advance(kv_cache *kv, int32_t seq_id, int64_t p_first, int64_t p_end,
                          strata_err *err);

/* Window blocks in use, all sequences together (tests, figures). */
int32_t kv_window_blocks_used(const kv_cache *kv);

/* The write guard. Whether an active sequence may write its positions
 * from p0 on (p0 <= its length) once kv_seq_truncate has cut it to p0:
 * the one block of its table that such writes reach and truncating keeps,
 * the block holding p0 when p0 is inside a block, must be the sequence's
 * alone (refcount 1: held by no other sequence and not listed in the
 * prefix cache, whose index holds a reference of its own). Blocks past it
 * are released by the truncation and taken fresh. Writing into a shared or
 * published block would change the keys and values others read, or that
 * a later lookup hands out for other tokens: a programming error (the
 * engine never does it; kv_seq_reuse_prefix copies such a block first).
 * Returns 0, or STRATA_EINVAL naming the sequence, position and block.
 * One check per sequence per batch (model_forward calls it before it
 * changes anything), none per row. */
int kv_seq_check_writable(const kv_cache *kv, int32_t seq_id, int64_t p0, strata_err *err);

bool kv_seq_active(const kv_cache *kv, int32_t seq_id);

/* Positions held by the sequence (0 when inactive or out of range). */
int64_t kv_seq_len(const kv_cache *kv, int32_t seq_id);

/* Blocks the sequence would need to take from the pool to hold n_pos
 * positions (0 when it already has room). */
int32_t kv_seq_blocks_needed(const kv_cache *kv, int32_t seq_id, int64_t n_pos);

/* Grows an active sequence's table to hold positions [0, n_pos) and sets
 * its length to n_pos (never shrinks: use kv_seq_truncate). The rows of
 * new positions are for the caller to write. Either all needed blocks are
 * taken or none: STRATA_ERANGE when the pool has too few free blocks or
 * n_pos is past what one sequence may hold. With window layers it also
 * advances the window (kv_seq_window_advance from the old length to
 * n_pos), so it takes at most swa_batch positions at a time there. */
int kv_seq_extend(kv_cache *kv, int32_t seq_id, int64_t n_pos, strata_err *err);

/* kv_seq_extend for the main pool only: the caller advances the window
 * per chunk (the forward pass, whose batches may exceed swa_batch). */
int kv_seq_extend_main(kv_cache *kv, int32_t seq_id, int64_t n_pos, strata_err *err);

/* Makes the pool elastic: steps of step_blocks blocks (>= 1), the steps
 * that hold the first resident_blocks blocks are never given back, and a
 * step whose blocks all stay free for hold_ms (>= 0) is given back by
 * kv_pool_trim. Steps count as committed from now on as they are used.
 * Errors: STRATA_EINVAL for bad values, STRATA_ENOMEM. */
int kv_pool_set_elastic(kv_cache *kv, int32_t step_blocks, int32_t resident_blocks,
                        double hold_ms, strata_err *err);

/* Gives back to the operating system the steps that have been free for
 * the hold time as of now_ms (base/clock.h's milliseconds) and were used
 * since they were last given back. Returns how many it gave back; 0 when
 * the pool is not elastic. */
int32_t kv_pool_trim(kv_cache *kv, double now_ms);

/* The milliseconds from now_ms until the next step kv_pool_trim would give
 * back; -1 when none is due (nothing free and committed, or not elastic). */
double kv_pool_next_trim_ms(const kv_cache *kv, double now_ms);

/* Steps committed (used since last given back, or resident). */
int32_t kv_pool_committed_steps(const kv_cache *kv);

/* Writes every page of the pool now (so it is resident from the start)
 * and turns trimming off. */
void kv_pool_prefault(kv_cache *kv);

/* Free blocks in the pool: on the free list, plus the idle cached blocks
 * that taking a block would evict (kv_prefix.h). */
int32_t kv_free_blocks(const kv_cache *kv);

/* The start of the key rows of (layer, block, KV head): block_tokens rows
 * of k_row_bytes, row i for position block_index * block_tokens + i. */
/* For a window layer, block is a window block id (from the sequence's
 * w_blocks: kv_seq_layer_blocks). */
static inline uint8_t *kv_k_block(const kv_cache *kv, int64_t layer, int32_t block,
                                  int64_t head)
{
    uint8_t *base = kv->k;
    size_t nb = (size_t)kv->n_blocks;
    if (kv->layer_swa != NULL) {
        if (kv->layer_swa[layer]) {
            base = kv->wk;
            nb = (size_t)kv->w_n_blocks;
        }
        layer = kv->layer_slot[layer];
    }
    return base + ((size_t)layer * nb + (size_t)block) * kv->k_block_bytes +
           (size_t)head * (size_t)kv->block_tokens * kv->k_row_bytes;
}

static inline uint8_t *kv_v_block(const kv_cache *kv, int64_t layer, int32_t block,
                                  int64_t head)
{
    uint8_t *base = kv->v;
    size_t nb = (size_t)kv->n_blocks;
    if (kv->layer_swa != NULL) {
        if (kv->layer_swa[layer]) {
            base = kv->wv;
            nb = (size_t)kv->w_n_blocks;
        }
        layer = kv->layer_slot[layer];
    }
    return base + ((size_t)layer * nb + (size_t)block) * kv->v_block_bytes +
           (size_t)head * (size_t)kv->block_tokens * kv->v_row_bytes;
}

/* The block table a layer reads a sequence's rows through: the window
 * table for a window layer (entries before w_lo are -1: never read, the
 * window skips them), the main one otherwise. */
static inline const int32_t *kv_seq_layer_blocks(const kv_cache *kv, const kv_seq *s,
                                                 int64_t layer)
{
    return kv->layer_swa != NULL && kv->layer_swa[layer] ? s->w_blocks : s->blocks;
}

/* The key / value row of position pos (< the sequence's length) of an
 * active sequence, for one layer and KV head. */
uint8_t *kv_k_row(const kv_cache *kv, int32_t seq_id, int64_t layer, int64_t pos, int64_t head);
uint8_t *kv_v_row(const kv_cache *kv, int32_t seq_id, int64_t layer, int64_t pos, int64_t head);

/* For kv_prefix.c: takes the lowest free block (the list must not be
 * empty), its refcount set to 1; gives back a block whose refcount the
 * caller set to 0. Both keep the steps' figures. */
int32_t kv_block_alloc(kv_cache *kv);
void kv_block_free(kv_cache *kv, int32_t id);

/* For kv_prefix.c: takes a free window block (the list must not be
 * empty), refcount 1; drops one reference, freeing the block at 0. */
int32_t kv_window_alloc(kv_cache *kv);
void kv_window_unref(kv_cache *kv, int32_t id);

#endif
