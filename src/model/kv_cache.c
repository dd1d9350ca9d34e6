/* The paged KV cache: the block pool (its two mappings, elastic or
 * resident), its free list, the per-sequence block tables, and the window
 * pool of the sliding-window layers with its tables (see kv_cache.h). */
#include "kv_cache.h"

#include "base/clock.h"
#include "gguf/types.h"
#include "model/kv_prefix.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

/* Refuse pools whose byte count would not fit comfortably in size_t. */
#define KV_MAX_POOL_BYTES ((size_t)1 << 46)

typedef struct kv_geometry {
    int block_tokens;
    int64_t n_blocks;
    size_t k_row_bytes, v_row_bytes;
    size_t k_block_bytes, v_block_bytes;
    int64_t n_layer_full, n_layer_swa;
    int64_t w_n_blocks;
    size_t pool_bytes; /* k and v together, both pools */
} kv_geometry;

uint32_t kv_type_resolve(uint32_t type)
{
    return type == 0 ? STRATA_TYPE_F16 : type;
}

int kv_type_parse(const char *name, uint32_t *type, strata_err *err)
{
    if (name != NULL && strcasecmp(name, "f16") == 0) {
        *type = STRATA_TYPE_F16;
        return 0;
    }
    if (name != NULL && strcasecmp(name, "q8_0") == 0) {
        *type = STRATA_TYPE_Q8_0;
        return 0;
    }
    return strata_err_set(err, STRATA_EINVAL, "unknown KV cache type '%s' (f16 or q8_0)",
                          name != NULL ? name : "");
}

/* NULL when `type` can hold rows of head_dim elements; the reason otherwise. */
static const char *kv_type_problem(uint32_t type, int64_t head_dim)
{
    if (type == STRATA_TYPE_F16) return NULL;
    if (type != STRATA_TYPE_Q8_0) return "the type is not f16 or q8_0";
    return head_dim % 32 == 0 ? NULL : "q8_0 needs a head size that is a multiple of 32";
}

static int kv_geometry_of(const kv_cache_params *p, kv_geometry *geo)
{
    memset(geo, 0, sizeof(*geo));
    const uint32_t kt = kv_type_resolve(p->k_type), vt = kv_type_resolve(p->v_type);
    int bt = p->block_tokens > 0 ? p->block_tokens : KV_BLOCK_TOKENS;
    if (p->n_layer <= 0 || p->n_head_kv <= 0 || p->head_dim <= 0 || p->head_dim_v <= 0 ||
        p->n_ctx <= 0 || p->n_seq_max <= 0 || bt > 4096) {
        return -1;
    }
    const int64_t lim = 1LL << 24;
    if (p->n_layer > lim || p->n_head_kv > lim || p->head_dim > lim || p->head_dim_v > lim ||
        p->n_ctx > (1LL << 31) - 4096 || p->n_seq_max > (1 << 20)) {
        return -1;
    }
    if (kv_type_problem(kt, p->head_dim) != NULL || kv_type_problem(vt, p->head_dim_v) != NULL) {
        return -1;
    }
    geo->block_tokens = bt;
    geo->n_blocks = (p->n_ctx + bt - 1) / bt;
    geo->k_row_bytes = strata_type_row_bytes(kt, p->head_dim);
    geo->v_row_bytes = strata_type_row_bytes(vt, p->head_dim_v);
    /* Each factor is below 2^31, so check the products in double first. */
    double total = (double)p->n_layer * (double)geo->n_blocks * (double)p->n_head_kv *
                   (double)bt * (double)(geo->k_row_bytes + geo->v_row_bytes);
    if (total > (double)KV_MAX_POOL_BYTES) return -1;
    geo->k_block_bytes = (size_t)p->n_head_kv * (size_t)bt * geo->k_row_bytes;
    geo->v_block_bytes = (size_t)p->n_head_kv * (size_t)bt * geo->v_row_bytes;
    geo->n_layer_full = p->n_layer;
    if (p->n_swa > 0 && p->layer_swa != NULL) {
        for (int64_t l = 0; l < p->n_layer; l++) geo->n_layer_swa += p->layer_swa[l] != 0;
        geo->n_layer_full -= geo->n_layer_swa;
    }
    if (geo->n_layer_swa > 0) {
        /* per sequence: the window, the slack, one chunk, and a block at
         * each end for alignment (kv_cache.h, "Sliding windows") */
        int64_t slack = p->swa_slack > 0 ? p->swa_slack : bt;
        int64_t chunk = p->swa_batch > 0 ? p->swa_batch : p->n_ctx;
        if (p->n_swa > (1LL << 31) || slack > (1LL << 31) || chunk > (1LL << 31)) return -1;
        int64_t per_seq = (p->n_swa + slack + chunk + bt - 1) / bt + 2;
        double want = (double)per_seq * (double)p->n_seq_max;
        geo->w_n_blocks = want < (double)geo->n_blocks ? (int64_t)want : geo->n_blocks;
    }
    geo->pool_bytes = ((size_t)geo->n_layer_full * (size_t)geo->n_blocks +
                       (size_t)geo->n_layer_swa * (size_t)geo->w_n_blocks) *
                      (geo->k_block_bytes + geo->v_block_bytes);
    return 0;
}

size_t kv_cache_pool_bytes(const kv_cache_params *p)
{
    kv_geometry geo;
    return kv_geometry_of(p, &geo) == 0 ? geo.pool_bytes : 0;
}

size_t kv_cache_bytes(const kv_cache *kv)
{
    return kv->k_map_bytes + kv->v_map_bytes + kv->wk_map_bytes + kv->wv_map_bytes;
}

size_t kv_main_block_bytes(const kv_cache *kv)
{
    return (size_t)kv->n_layer_full * (kv->k_block_bytes + kv->v_block_bytes);
}

/* An anonymous reserved mapping of n bytes (at least one, so that a pool
 * with no layers still has an address); NULL on failure. */
static uint8_t *map_pool(size_t n)
{
    void *p = mmap(NULL, n > 0 ? n : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int kv_cache_init(kv_cache **out, const kv_cache_params *p, strata_err *err)
{
    *out = NULL;
    kv_geometry geo;
    const uint32_t kt = kv_type_resolve(p->k_type), vt = kv_type_resolve(p->v_type);
    const char *why = kv_type_problem(kt, p->head_dim);
    if (why != NULL) {
        return strata_err_set(err, STRATA_EINVAL, "KV cache: key type %s: %s (head size %" PRId64
                              ")", strata_type_name(kt), why, p->head_dim);
    }
    why = kv_type_problem(vt, p->head_dim_v);
    if (why != NULL) {
        return strata_err_set(err, STRATA_EINVAL, "KV cache: value type %s: %s (head size %" PRId64
                              ")", strata_type_name(vt), why, p->head_dim_v);
    }
    if (kv_geometry_of(p, &geo) != 0) {
        return strata_err_set(err, STRATA_EINVAL,
                              "KV cache: invalid size (layers %" PRId64 ", KV heads %" PRId64
                              ", head %" PRId64 "/%" PRId64 ", context %" PRId64 ", sequences %d)",
                              p->n_layer, p->n_head_kv, p->head_dim, p->head_dim_v, p->n_ctx,
                              p->n_seq_max);
    }
    kv_cache *kv = calloc(1, sizeof(*kv));
    if (kv == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    kv->n_layer = p->n_layer;
    kv->n_head_kv = p->n_head_kv;
    kv->head_dim = p->head_dim;
    kv->head_dim_v = p->head_dim_v;
    kv->block_tokens = geo.block_tokens;
    kv->k_type = kt;
    kv->v_type = vt;
    kv->type = kt;
    kv->k_row_bytes = geo.k_row_bytes;
    kv->v_row_bytes = geo.v_row_bytes;
    kv->k_block_bytes = geo.k_block_bytes;
    kv->v_block_bytes = geo.v_block_bytes;
    kv->n_blocks = (int32_t)geo.n_blocks;
    kv->max_blocks_per_seq = kv->n_blocks;
    kv->n_seq_max = p->n_seq_max;
    kv->n_layer_full = geo.n_layer_full;
    kv->n_layer_swa = geo.n_layer_swa;
    kv->w_n_blocks = (int32_t)geo.w_n_blocks;
    const bool swa = geo.n_layer_swa > 0;
    bool swa_ok = true;
    if (swa) {
        kv->n_swa = p->n_swa;
        kv->swa_slack = p->swa_slack > 0 ? p->swa_slack : kv->block_tokens;
        kv->layer_swa = calloc((size_t)kv->n_layer, 1);
        kv->layer_slot = calloc((size_t)kv->n_layer, sizeof(int64_t));
        kv->w_free_ids = malloc((size_t)kv->w_n_blocks * sizeof(int32_t));
        kv->w_refcount = calloc((size_t)kv->w_n_blocks, sizeof(int32_t));
        swa_ok = kv->layer_swa != NULL && kv->layer_slot != NULL && kv->w_free_ids != NULL &&
                 kv->w_refcount != NULL;
        for (int64_t l = 0, n_full = 0, n_swa = 0; swa_ok && l < kv->n_layer; l++) {
            kv->layer_swa[l] = p->layer_swa[l] != 0;
            kv->layer_slot[l] = kv->layer_swa[l] ? n_swa++ : n_full++;
        }
    }

    size_t k_bytes = (size_t)kv->n_layer_full * (size_t)kv->n_blocks * kv->k_block_bytes;
    size_t v_bytes = (size_t)kv->n_layer_full * (size_t)kv->n_blocks * kv->v_block_bytes;
    /* Anonymous mappings read as zeros, so rows nobody wrote yet are
     * finite; reserved, not committed: a page costs memory once written. */
    kv->k_map_bytes = k_bytes > 0 ? k_bytes : 1;
    kv->v_map_bytes = v_bytes > 0 ? v_bytes : 1;
    kv->k = map_pool(k_bytes);
    kv->v = map_pool(v_bytes);
    if (swa) {
        kv->wk_map_bytes = (size_t)kv->n_layer_swa * (size_t)kv->w_n_blocks * kv->k_block_bytes;
        kv->wv_map_bytes = (size_t)kv->n_layer_swa * (size_t)kv->w_n_blocks * kv->v_block_bytes;
        kv->wk = map_pool(kv->wk_map_bytes);
        kv->wv = map_pool(kv->wv_map_bytes);
        swa_ok = swa_ok && kv->wk != NULL && kv->wv != NULL;
    }
    kv->refcount = calloc((size_t)kv->n_blocks, sizeof(int32_t));
    kv->free_ids = malloc((size_t)kv->n_blocks * sizeof(int32_t));
    kv->seqs = calloc((size_t)kv->n_seq_max, sizeof(kv_seq));
    /* the main tables, then the window tables */
    size_t n_tables = swa ? 2 : 1;
    int32_t *tables = malloc(n_tables * (size_t)kv->n_seq_max * (size_t)kv->max_blocks_per_seq *
                             sizeof(int32_t));
    if (kv->k == NULL || kv->v == NULL || kv->refcount == NULL || kv->free_ids == NULL ||
        kv->seqs == NULL || tables == NULL || !swa_ok) {
        free(tables);
        kv_cache_free(kv);
        return strata_err_set(err, STRATA_ENOMEM, "KV cache: out of memory for %zu bytes",
                              k_bytes + v_bytes + kv->wk_map_bytes + kv->wv_map_bytes);
    }
    const size_t per = (size_t)kv->max_blocks_per_seq;
    for (int s = 0; s < kv->n_seq_max; s++) {
        kv->seqs[s].blocks = tables + (size_t)s * per;
        if (swa) {
            kv->seqs[s].w_blocks = tables + ((size_t)kv->n_seq_max + (size_t)s) * per;
            for (size_t i = 0; i < per; i++) kv->seqs[s].w_blocks[i] = -1;
        }
    }
    /* A sorted array is a valid min-heap. */
    for (int32_t i = 0; i < kv->n_blocks; i++) kv->free_ids[i] = i;
    kv->n_free = kv->n_blocks;
    for (int32_t i = 0; i < kv->w_n_blocks; i++) kv->w_free_ids[i] = i;
    kv->w_n_free = kv->w_n_blocks;
    *out = kv;
    return 0;
}

void kv_cache_free(kv_cache *kv)
{
    if (kv == NULL) return;
    kv_prefix_destroy(kv->prefix);
    if (kv->seqs != NULL) free(kv->seqs[0].blocks);
    free(kv->seqs);
    free(kv->free_ids);
    free(kv->refcount);
    if (kv->k != NULL) munmap(kv->k, kv->k_map_bytes);
    if (kv->v != NULL) munmap(kv->v, kv->v_map_bytes);
    if (kv->wk != NULL) munmap(kv->wk, kv->wk_map_bytes);
    if (kv->wv != NULL) munmap(kv->wv, kv->wv_map_bytes);
    free(kv->layer_swa);
    free(kv->layer_slot);
    free(kv->w_free_ids);
    free(kv->w_refcount);
    free(kv->step_held);
    free(kv->step_free_since);
    free(kv->step_committed);
    free(kv->step_quiet_since);
    free(kv);
}

/* ---- the free list (a min-heap) and the steps' figures ---- */

static void heap_push_in(int32_t *h, int32_t *n, int32_t id)
{
    int32_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > id) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = id;
}

static int32_t heap_pop_in(int32_t *h, int32_t *n_free)
{
    int32_t top = h[0], last = h[--*n_free];
    int32_t i = 0, n = *n_free;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = last;
    return top;
}

static void heap_push(kv_cache *kv, int32_t id)
{
    heap_push_in(kv->free_ids, &kv->n_free, id);
}

static int32_t heap_pop(kv_cache *kv)
{
    return heap_pop_in(kv->free_ids, &kv->n_free);
}

int32_t kv_block_alloc(kv_cache *kv)
{
    assert(kv->n_free > 0);
    int32_t id = heap_pop(kv);
    assert(kv->refcount[id] == 0);
    kv->refcount[id] = 1;
    if (kv->step_blocks > 0) {
        int32_t st = id / kv->step_blocks;
        kv->step_held[st]++;
        kv->step_committed[st] = 1;
    }
    return id;
}

void kv_block_free(kv_cache *kv, int32_t id)
{
    assert(kv->refcount[id] == 0 && kv->n_free < kv->n_blocks);
    heap_push(kv, id);
    if (kv->step_blocks > 0) {
        int32_t st = id / kv->step_blocks;
        assert(kv->step_held[st] > 0);
        if (--kv->step_held[st] == 0) kv->step_free_since[st] = strata_clock_ms();
    }
}

int kv_pool_set_elastic(kv_cache *kv, int32_t step_blocks, int32_t resident_blocks,
                        double hold_ms, strata_err *err)
{
    if (step_blocks <= 0 || resident_blocks < 0 || !(hold_ms >= 0)) {
        return strata_err_set(err, STRATA_EINVAL, "KV pool: step %" PRId32 " blocks, resident %"
                              PRId32 ", hold %.0f ms", step_blocks, resident_blocks, hold_ms);
    }
    if (step_blocks > kv->n_blocks) step_blocks = kv->n_blocks;
    int32_t n_steps = (kv->n_blocks + step_blocks - 1) / step_blocks;
    int32_t *held = calloc((size_t)n_steps, sizeof(int32_t));
    double *since = calloc((size_t)n_steps, sizeof(double));
    uint8_t *committed = calloc((size_t)n_steps, 1);
    double *quiet = malloc((size_t)n_steps * sizeof(double));
    if (held == NULL || since == NULL || committed == NULL || quiet == NULL) {
        free(quiet);
        free(held);
        free(since);
        free(committed);
        return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    }
    double now = strata_clock_ms();
    for (int32_t b = 0; b < kv->n_blocks; b++) {
        if (kv->refcount[b] > 0) held[b / step_blocks]++;
    }
    for (int32_t st = 0; st < n_steps; st++) {
        since[st] = now;
        quiet[st] = -1.0;
        committed[st] = held[st] > 0;
    }
    free(kv->step_held);
    free(kv->step_free_since);
    free(kv->step_committed);
    free(kv->step_quiet_since);
    kv->step_quiet_since = quiet;
    kv->step_held = held;
    kv->step_free_since = since;
    kv->step_committed = committed;
    kv->step_blocks = step_blocks;
    kv->n_steps = n_steps;
    int64_t rs = ((int64_t)resident_blocks + step_blocks - 1) / step_blocks;
    kv->resident_steps = (int32_t)(rs < n_steps ? rs : n_steps);
    kv->hold_ms = hold_ms;
    return 0;
}

/* MADV_DONTNEED over the whole pages inside [p, p + n): a page shared with
 * a neighbouring step stays (rounding inward never drops another's rows). */
static void release_range(uint8_t *p, size_t n)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) / page * page, hi = ((uintptr_t)p + n) / page * page;
    if (hi <= lo) return;
    while (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0 && errno == EINTR) {
    }
}

static void step_release(kv_cache *kv, int32_t st)
{
    int32_t b0 = st * kv->step_blocks;
    int32_t nb = kv->n_blocks - b0 < kv->step_blocks ? kv->n_blocks - b0 : kv->step_blocks;
    for (int64_t l = 0; l < kv->n_layer; l++) {
        if (kv->layer_swa != NULL && kv->layer_swa[l]) continue; /* not this pool's */
        release_range(kv_k_block(kv, l, b0, 0), (size_t)nb * kv->k_block_bytes);
        release_range(kv_v_block(kv, l, b0, 0), (size_t)nb * kv->v_block_bytes);
    }
    kv->step_committed[st] = 0;
    kv->n_trimmed++;
}

/* Whether every held block of step st is idle in the prefix cache. */
static bool step_cache_only(const kv_cache *kv, int32_t st)
{
    int32_t b0 = st * kv->step_blocks;
    int32_t b1 = b0 + kv->step_blocks < kv->n_blocks ? b0 + kv->step_blocks : kv->n_blocks;
    for (int32_t b = b0; b < b1; b++) {
        if (kv->refcount[b] > 0 && !kv_prefix_block_idle(kv, b)) return false;
    }
    return true;
}

int32_t kv_pool_trim(kv_cache *kv, double now_ms)
{
    int32_t n = 0;
    for (int32_t st = kv->resident_steps; st < kv->n_steps; st++) {
        /* a step that only the prefix cache holds: its clock starts when
         * first seen so; once the hold has passed its blocks are evicted */
        bool cache_only = kv->step_held[st] > 0 && kv->prefix != NULL && step_cache_only(kv, st);
        if (!cache_only) kv->step_quiet_since[st] = -1.0;
        if (cache_only) {
            if (kv->step_quiet_since[st] < 0) kv->step_quiet_since[st] = now_ms;
            if (now_ms - kv->step_quiet_since[st] >= kv->hold_ms) {
                int32_t b0 = st * kv->step_blocks;
                int32_t b1 = b0 + kv->step_blocks < kv->n_blocks ? b0 + kv->step_blocks
                                                                  : kv->n_blocks;
                for (int32_t b = b0; b < b1; b++) kv_prefix_evict_block(kv, b);
                kv->step_free_since[st] = now_ms - kv->hold_ms; /* due now */
                kv->step_quiet_since[st] = -1.0;
            }
        }
        if (kv->step_committed[st] && kv->step_held[st] == 0 &&
            now_ms - kv->step_free_since[st] >= kv->hold_ms) {
            step_release(kv, st);
            n++;
        }
    }
    return n;
}

double kv_pool_next_trim_ms(const kv_cache *kv, double now_ms)
{
    double best = -1.0;
    for (int32_t st = kv->resident_steps; st < kv->n_steps; st++) {
        if (kv->step_held[st] > 0 && kv->prefix != NULL && step_cache_only(kv, st)) {
            /* 0 when not yet seen so: kv_pool_trim starts its clock */
            double q = kv->step_quiet_since[st];
            double left = q < 0 ? 0.0 : q + kv->hold_ms - now_ms;
            if (left < 0) left = 0;
            if (best < 0 || left < best) best = left;
            continue;
        }
        if (!kv->step_committed[st] || kv->step_held[st] != 0) continue;
        double left = kv->step_free_since[st] + kv->hold_ms - now_ms;
        if (left < 0) left = 0;
        if (best < 0 || left < best) best = left;
    }
    return best;
}

int32_t kv_pool_committed_steps(const kv_cache *kv)
{
    int32_t n = 0;
    for (int32_t st = 0; st < kv->n_steps; st++) n += kv->step_committed[st] || st < kv->resident_steps;
    return n;
}

void kv_pool_prefault(kv_cache *kv)
{
    /* the rows are zeros already; writing zeros commits the pages */
    memset(kv->k, 0, kv->k_map_bytes);
    memset(kv->v, 0, kv->v_map_bytes);
    if (kv->wk != NULL) memset(kv->wk, 0, kv->wk_map_bytes);
    if (kv->wv != NULL) memset(kv->wv, 0, kv->wv_map_bytes);
    kv->resident_steps = kv->n_steps;
}

static kv_seq *seq_get(const kv_cache *kv, int32_t seq_id)
{
    if (seq_id < 0 || seq_id >= kv->n_seq_max) return NULL;
    kv_seq *s = &kv->seqs[seq_id];
    return s->active ? s : NULL;
}

static void block_release(kv_cache *kv, int32_t id)
{
    assert(kv->refcount[id] > 0);
    if (--kv->refcount[id] == 0) {
        kv_block_free(kv, id);
    } else if (kv->refcount[id] == 1 && kv->prefix != NULL) {
        kv_prefix_on_unref(kv, id); /* idle when only the index holds it */
    }
}

int kv_seq_add(kv_cache *kv, int32_t seq_id, strata_err *err)
{
    if (seq_id < 0 || seq_id >= kv->n_seq_max) {
        return strata_err_set(err, STRATA_EINVAL, "sequence id %" PRId32 " is outside [0, %d)",
                              seq_id, kv->n_seq_max);
    }
    kv_seq *s = &kv->seqs[seq_id];
    if (s->active) {
        return strata_err_set(err, STRATA_EINVAL, "sequence %" PRId32 " is already active",
                              seq_id);
    }
    s->active = true;
    s->n_pos = 0;
    s->n_blocks = 0;
    s->w_lo = s->w_end = 0;
    return 0;
}

void kv_seq_remove(kv_cache *kv, int32_t seq_id)
{
    kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL) return;
    kv_seq_truncate(kv, seq_id, 0);
    s->active = false;
}

/* ---- the window pool ---- */

int32_t kv_window_alloc(kv_cache *kv)
{
    assert(kv->w_n_free > 0);
    int32_t id = heap_pop_in(kv->w_free_ids, &kv->w_n_free);
    assert(kv->w_refcount[id] == 0);
    kv->w_refcount[id] = 1;
    return id;
}

void kv_window_unref(kv_cache *kv, int32_t id)
{
    assert(kv->w_refcount[id] > 0);
    if (--kv->w_refcount[id] == 0) heap_push_in(kv->w_free_ids, &kv->w_n_free, id);
}

static void window_release(kv_cache *kv, kv_seq *s, int32_t idx)
{
    assert(s->w_blocks[idx] >= 0);
    kv_window_unref(kv, s->w_blocks[idx]);
    s->w_blocks[idx] = -1;
}

/* Releases window blocks [keep, w_end): the truncation's side. */
static void window_cut(kv_cache *kv, kv_seq *s, int32_t keep)
{
    while (s->w_end > keep && s->w_end > s->w_lo) window_release(kv, s, --s->w_end);
}

bool kv_seq_can_truncate(const kv_cache *kv, int32_t seq_id, int64_t n_pos)
{
    const kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL || kv->layer_swa == NULL || n_pos <= 0) return true;
    int64_t lo = n_pos - kv->n_swa + 1; /* the first position a query at n_pos sees */
    if (lo < 0) lo = 0;
    return (int64_t)s->w_lo * kv->block_tokens <= lo;
}

int kv_seq_window_advance(kv_cache *kv, int32_t seq_id, int64_t p_first, int64_t p_end,
                          strata_err *err)
{
    kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL || kv->layer_swa == NULL) return 0;
    const int bt = kv->block_tokens;
    if (p_end > s->n_pos) p_end = s->n_pos;
    /* blocks wholly before every later query's window */
    int64_t floor_pos = p_first - kv->n_swa - kv->swa_slack;
    int64_t drop = floor_pos > 0 ? floor_pos / bt : 0; /* blocks [0, drop) end at or before it */
    if (drop > s->w_end) drop = s->w_end;
    /* what no later query sees goes first (always right to give back);
     * the prefix cache lets go of it too: only chain ends keep a window */
    for (int32_t i = s->w_lo; i < (int32_t)drop; i++) {
        if (s->w_blocks[i] < 0) continue;
        if (kv->prefix != NULL) kv_prefix_on_window_drop(kv, s->blocks[i], s->w_blocks[i]);
        window_release(kv, s, i);
    }
    if (drop > s->w_lo) s->w_lo = (int32_t)drop;
    if (s->w_end < s->w_lo) s->w_end = s->w_lo;
    int32_t want = (int32_t)((p_end + bt - 1) / bt);
    int32_t need = want > s->w_end ? want - s->w_end : 0;
    /* windows the prefix cache keeps for ended sequences make room */
    if (need > kv->w_n_free && kv->prefix != NULL) {
        kv_prefix_evict_windows(kv, need - kv->w_n_free);
    }
    if (need > kv->w_n_free) {
        return strata_err_set(err, STRATA_ERANGE,
                              "KV cache: the sliding-window pool is full (sequence %" PRId32
                              " needs %" PRId32 " blocks, %" PRId32 " are free)",
                              seq_id, need, kv->w_n_free);
    }
    while (s->w_end < want) s->w_blocks[s->w_end++] = kv_window_alloc(kv);
    return 0;
}

int32_t kv_window_blocks_used(const kv_cache *kv)
{
    return kv->w_n_blocks - kv->w_n_free;
}

void kv_seq_truncate(kv_cache *kv, int32_t seq_id, int64_t n_pos)
{
    kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL || n_pos >= s->n_pos) return;
    if (n_pos < 0) n_pos = 0;
    /* a cut below the held window cannot go on exactly: empty it */
    if (!kv_seq_can_truncate(kv, seq_id, n_pos)) n_pos = 0;
    int32_t keep = (int32_t)((n_pos + kv->block_tokens - 1) / kv->block_tokens);
    if (kv->layer_swa != NULL) {
        window_cut(kv, s, keep);
        if (n_pos == 0) s->w_lo = s->w_end = 0;
    }
    while (s->n_blocks > keep) block_release(kv, s->blocks[--s->n_blocks]);
    s->n_pos = n_pos;
    if (kv->prefix != NULL) kv_prefix_on_truncate(kv, seq_id, n_pos);
}

int kv_seq_check_writable(const kv_cache *kv, int32_t seq_id, int64_t p0, strata_err *err)
{
    const kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL) {
        return strata_err_set(err, STRATA_EINVAL, "sequence %" PRId32 " is not active", seq_id);
    }
    if (p0 < 0 || p0 % kv->block_tokens == 0) return 0;
    int64_t idx = p0 / kv->block_tokens;
    if (idx >= s->n_blocks) return 0;
    if (kv->layer_swa != NULL && idx >= s->w_lo && idx < s->w_end &&
        kv->w_refcount[s->w_blocks[idx]] != 1) {
        return strata_err_set(err, STRATA_EINVAL,
                              "KV cache: sequence %" PRId32 " would write position %" PRId64
                              " into window block %" PRId32 ", which is shared (%" PRId32
                              " references): shared blocks are read-only",
                              seq_id, p0, s->w_blocks[idx], kv->w_refcount[s->w_blocks[idx]]);
    }
    int32_t b = s->blocks[idx];
    if (kv->refcount[b] == 1) return 0;
    return strata_err_set(err, STRATA_EINVAL,
                          "KV cache: sequence %" PRId32 " would write position %" PRId64
                          " into block %" PRId32 ", which is %s (%" PRId32
                          " references): shared blocks are read-only",
                          seq_id, p0, b,
                          kv->prefix != NULL && kv_prefix_block_listed(kv, b)
                              ? "published in the prefix cache"
                              : "shared",
                          kv->refcount[b]);
}

bool kv_seq_active(const kv_cache *kv, int32_t seq_id)
{
    return seq_get(kv, seq_id) != NULL;
}

int64_t kv_seq_len(const kv_cache *kv, int32_t seq_id)
{
    const kv_seq *s = seq_get(kv, seq_id);
    return s != NULL ? s->n_pos : 0;
}

int32_t kv_seq_blocks_needed(const kv_cache *kv, int32_t seq_id, int64_t n_pos)
{
    const kv_seq *s = seq_get(kv, seq_id);
    int32_t have = s != NULL ? s->n_blocks : 0;
    if (n_pos <= 0) return 0;
    int64_t want = (n_pos + kv->block_tokens - 1) / kv->block_tokens;
    return want > have ? (int32_t)(want > INT32_MAX ? INT32_MAX : want - have) : 0;
}

int kv_seq_extend(kv_cache *kv, int32_t seq_id, int64_t n_pos, strata_err *err)
{
    int64_t old = kv_seq_len(kv, seq_id);
    int rc = kv_seq_extend_main(kv, seq_id, n_pos, err);
    if (rc != 0 || kv->layer_swa == NULL || n_pos <= old) return rc;
    rc = kv_seq_window_advance(kv, seq_id, old, n_pos, err);
    if (rc != 0) kv_seq_truncate(kv, seq_id, old); /* all or none */
    return rc;
}

int kv_seq_extend_main(kv_cache *kv, int32_t seq_id, int64_t n_pos, strata_err *err)
{
    kv_seq *s = seq_get(kv, seq_id);
    if (s == NULL) {
        return strata_err_set(err, STRATA_EINVAL, "sequence %" PRId32 " is not active", seq_id);
    }
    if (n_pos <= s->n_pos) return 0;
    if (n_pos > (int64_t)kv->max_blocks_per_seq * kv->block_tokens) {
        return strata_err_set(err, STRATA_ERANGE,
                              "sequence %" PRId32 ": %" PRId64
                              " positions exceed the KV cache's %" PRId64,
                              seq_id, n_pos, (int64_t)kv->max_blocks_per_seq * kv->block_tokens);
    }
    int32_t need = kv_seq_blocks_needed(kv, seq_id, n_pos);
    if (need > kv_free_blocks(kv)) {
        return strata_err_set(err, STRATA_ERANGE,
                              "KV cache full: sequence %" PRId32 " needs %" PRId32
                              " more blocks, %" PRId32 " are free",
                              seq_id, need, kv_free_blocks(kv));
    }
    for (int32_t i = 0; i < need; i++) {
        /* idle cached blocks count as free: the oldest goes when no
         * other is left */
        if (kv->n_free == 0) kv_prefix_evict_one(kv);
        s->blocks[s->n_blocks++] = kv_block_alloc(kv);
    }
    s->n_pos = n_pos;
    return 0;
}

int32_t kv_free_blocks(const kv_cache *kv)
{
    return kv->n_free + kv_prefix_n_idle(kv);
}

uint8_t *kv_k_row(const kv_cache *kv, int32_t seq_id, int64_t layer, int64_t pos, int64_t head)
{
    const kv_seq *s = &kv->seqs[seq_id];
    assert(s->active && pos >= 0 && pos < s->n_pos);
    int32_t block = kv_seq_layer_blocks(kv, s, layer)[pos / kv->block_tokens];
    assert(block >= 0);
    return kv_k_block(kv, layer, block, head) +
           (size_t)(pos % kv->block_tokens) * kv->k_row_bytes;
}

uint8_t *kv_v_row(const kv_cache *kv, int32_t seq_id, int64_t layer, int64_t pos, int64_t head)
{
    const kv_seq *s = &kv->seqs[seq_id];
    assert(s->active && pos >= 0 && pos < s->n_pos);
    int32_t block = kv_seq_layer_blocks(kv, s, layer)[pos / kv->block_tokens];
    assert(block >= 0);
    return kv_v_block(kv, layer, block, head) +
           (size_t)(pos % kv->block_tokens) * kv->v_row_bytes;
}
