/* The scheduler of engine.h: requests, slots, the FIFO queue, building one
 * batch per step, sampling, embeddings pooling and each request's
 * statistics. Every buffer a step uses is allocated in engine_init; a
 * request allocates its sampler when it is admitted into a slot (not while
 * it waits, so a long queue costs only its prompts). */
#include "engine/engine.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/rng.h"
#include "model/forward.h"
#include "engine/engine_grammar.h"
#include "engine/spec.h"
#include "model/kv_prefix.h"
#include "sample/sampler.h"
#include "text/vocab.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum req_state {
    REQ_QUEUED,
    REQ_PREFILL,
    REQ_DECODE,
} req_state;

/* One gen or embed from arrival to its terminal message. */
typedef struct engine_req {
    int64_t id;
    bool is_embed;
    proto_msg msg;            /* the request as decoded: owns tokens, bias, stop tokens */
    const int32_t *prompt;    /* (n_prompt) msg's tokens */
    int64_t n_prompt;
    int64_t max_tokens;       /* -1: until the context is full */
    int32_t logprobs;         /* -1 none; 0 chosen only; N: and the top N */
    bool plp;                 /* gen's prompt_logprobs (`plp` lines), with plp_top alternatives */
    int32_t plp_top;
    int64_t plp_next;         /* prompt positions [0, plp_next) had their logits: prompt
                                 tokens 1 .. plp_next went out in `plp` */
    proto_pooling pooling;    /* embed: never DEFAULT once queued */
    req_state state;
    bool cancelled;
    int slot;                 /* the KV sequence; -1 while queued */
    int64_t order;            /* first admission's number (kept when preempted): prefill goes
                                 oldest first, and only younger requests are preempted */
    bool use_cache;           /* the prefix cache is on and the request did not opt out */
    int64_t n_cached;         /* prompt tokens taken from the prefix cache */
    int64_t n_done;           /* positions of n_fill in the KV (the cached ones too) */
    int64_t n_fill;           /* positions to prefill: the prompt, or after a preemption the
                                 prompt and the tokens generated (the last one pending) */
    int64_t n_prompt_eval;    /* prompt tokens evaluated before its last preemption */
    int64_t n_preempted;      /* times preempted */
    bool resume_oom;          /* preempted without memory to save its tokens: ends with err
                                 "internal" when it reaches the queue's head */
    int32_t *resume;          /* (n_fill) prompt + generated, saved when preempted with
                                 n_gen > 0; NULL otherwise */
    int64_t n_gen;            /* tokens sent */
    int32_t next_tok;         /* REQ_DECODE: sampled and sent, not yet in the KV */
    sampler *smp;             /* gen, from admission */
    grammar *gram;            /* gen with a grammar, from arrival; NULL: none */
    grammar_state *gstate;    /* its position (kept across preemption, as smp) */
    double *embd_sum;         /* embed, from admission: (n_embd) */
    int64_t n_pooled;
    double t_prompt_start;    /* ms, start of its first prefill step; < 0 before */
    double t_prompt_end;      /* ms, end of its last prefill step; < 0 before */
    /* this step's part of the batch */
    int64_t step_n;           /* tokens */
    int64_t step_logit_row;   /* row of logits, -1 none */
    int64_t step_plp_row;     /* first row of its prompt positions' logits (plp) */
    int64_t step_plp_n;       /* ... and how many, for positions plp_next onwards */
    int64_t step_embd_row;    /* first row of hidden states */
    int64_t step_n_embd;
    /* speculative decoding (engine.h) */
    bool spec;                /* drafts may be proposed for it */
    int step_draft;           /* draft tokens in this step's batch, after next_tok */
    int32_t draft[SPEC_DRAFT_MAX_LIMIT];
    int64_t spec_keep;        /* while its drafts are verified: the KV positions that hold
                                 accepted tokens (the rest are cut before publishing); -1 */
    int64_t n_drafted, n_draft_accepted;
    spec_throttle thr;        /* spec.h "Throttle" */
    spec_accept acc_est;      /* spec.h "Cost gate": its acceptance counts */
    /* the draft model's sequence (slot `slot` of its KV), when it drafts */
    int64_t d_len;            /* its positions that hold the sequence's tokens (hist) */
    int d_fed;                /* this step's drafts fed to it after d_len */
    int d_cap;                /* this step: the most drafts it may propose; 0: none */
    int64_t d_row;            /* this step: its row of draft logits */
    bool d_lagging;           /* this step: it could draft but lacks too much; catching up */
    struct engine_req *next;  /* queue link */
} engine_req;

struct engine {
    const model *m;
    model_ctx *ctx;
    kv_cache *kv;
    int n_slots;
    int64_t n_ctx, n_batch, n_vocab, n_embd;
    uint8_t *is_eog;          /* (n_vocab) end-of-generation tokens */
    float *ban_logits;        /* (n_vocab) logits with allowed_tokens', bad_words' and
                                 min_tokens' bans */
    vocab *voc;               /* the model's vocabulary (DRY's breakers); NULL: none */
    /* DRY's restart sequences of the last set of breaker strings asked for */
    char dry_key[PROTO_MAX_DRY_BREAKERS * (PROTO_DRY_BREAKER_BYTES + 1) + 1];
    bool dry_cached;
    sample_dry_breaker *dry_br;
    size_t n_dry_br;
    /* Grammars (NULL when the model has no usable vocabulary: a gen with a
     * grammar is then refused): the mask index, each token's bytes, and the
     * scratch of one mask and one masked copy of the logits. */
    grammar_vocab *gvocab;
    engine_tok_bytes tok_bytes;
    uint32_t *gmask;
    float *glogits;
    proto_pooling model_pooling;
    bool accepting;
    engine_req **slots;       /* (n_slots) running requests, NULL when free */
    engine_req *queue_head, *queue_tail;
    int64_t n_queued;
    int64_t n_admitted;
    uint64_t seed_state;      /* for requests without a seed */
    /* one step's batch: (n_batch) each */
    int32_t *b_tok, *b_seq, *b_pos;
    int8_t *b_want, *b_want_embd;
    engine_req **b_reqs;      /* (n_slots) requests in the batch, in batch order */
    engine_req **b_prefill;   /* (n_slots) prefilling requests, oldest admission first */
    float *vec;               /* (n_embd) an embedding being sent */
    float *logits;            /* (logit_rows, n_vocab) */
    size_t logit_rows;        /* one per slot (and draft token); PROTO_PLP_CHUNK more once a
                                 prompt_logprobs request came (grow_for_plp) */
    bool plp_ready;           /* grown; plp_lp / plp_top allocated */
    proto_logprob *plp_lp;    /* (PROTO_PLP_CHUNK) one `plp` line's entries */
    proto_top *plp_tops;      /* (PROTO_PLP_CHUNK, PROTO_MAX_LOGPROBS) their alternatives */
    float *embd;              /* (n_batch, n_embd) */
    int32_t *hist;            /* (n_slots, n_ctx) each slot's tokens by position: its prompt,
                                 then what it generated (what the prefix cache publishes) */
    bool prefix_on;           /* engine.h "Prefix cache" */
    int64_t prefix_min_tokens;
    int64_t cache_blocks;     /* the budget of idle cached blocks */
    char kv_type[8];
    char arch[32];
    int64_t kv_bytes;         /* the pool's, for `ready` and `pong` */
    int64_t n_pool_tokens;    /* positions of the shared pool (n_blocks x block_tokens) */
    int64_t n_limit;          /* a request's positions at most: min(n_ctx, n_pool_tokens) */
    int64_t n_preemptions;    /* since start (scheduler's; pg_preemptions is the copy) */
    bool kv_resident;         /* the pool's profile, for `ready` (engine.h "Memory") */
    int64_t kv_init_tokens, kv_step_tokens, kv_hold_ms;
    engine_end_fn on_end;     /* engine_set_end_hook */
    void *on_end_ctx;
    int64_t hang_at_step;     /* test hook (engine_params) */
    bool draft_ngram;         /* speculative decoding's source (engine.h) */
    int draft_max, draft_min;
    float draft_p_min;
    bool draft_gate;          /* spec.h "Cost gate" on */
    spec_cost cost;           /* its step and draft times, acceptance prior */
    double (*test_step_ms)(int64_t, bool); /* engine_params */
    /* this step's plan, for the gate: tokens so far and tokens it sends */
    int64_t plan_n0, plan_out;
    /* the draft model (engine.h "Draft model"), NULL without one */
    const model *dm;
    model_ctx *dctx;
    kv_cache *dkv;
    int32_t *d_tok, *d_seq, *d_pos; /* (n_batch) a draft forward's batch */
    int8_t *d_want;
    float *d_logits;          /* (n_slots, n_vocab) */
    engine_req **d_reqs;      /* (n_slots) the sequences drafting this step */
    int64_t d_pool_tokens;
    /* progress_lock: what engine_get_progress reads (engine.h "Progress") */
    pthread_mutex_t progress_lock;
    int64_t pg_steps;         /* completed */
    bool pg_running;
    double pg_start_ms;       /* of the running step */
    int64_t pg_tokens;        /* of the running step's batch; 0 until it is built */
    double pg_cost[PROTO_PONG_COST_STEPS]; /* ms per token of recent steps, a ring */
    int pg_n_cost, pg_i_cost;
    int64_t pg_kv_used;       /* blocks held, at the end of the last step */
    int64_t pg_kv_cached;     /* blocks listed in the prefix cache, then */
    int64_t pg_lookup_tokens, pg_hit_tokens; /* the prefix cache's, then */
    int64_t pg_preemptions;
    int64_t pg_committed_bytes; /* the pool's, then */
};

static int64_t committed_bytes(const engine *e);

/* ---- set-up ---- */

/* End-of-generation ids: from the vocab (which knows EOT-like tokens by
 * text too), else the GGUF's eos/eot ids; and, when the vocab covers the
 * model's logits, the tables grammars need (without them a gen with a
 * grammar is refused). */
static void load_eog(engine *e)
{
    vocab *v = NULL;
    strata_err err;
    if (vocab_load(&v, e->m->g, &err) == 0) {
        int32_t n = vocab_n_tokens(v);
        for (int32_t t = 0; t < n && t < e->n_vocab; t++) e->is_eog[t] = vocab_is_eog(v, t);
        if (n == e->n_vocab) {
            if (engine_grammar_tables(&e->gvocab, &e->tok_bytes, v, &err) == 0) {
                e->gmask = malloc(grammar_mask_words(e->gvocab) * sizeof(uint32_t));
                e->glogits = malloc((size_t)e->n_vocab * sizeof(float));
            }
            if (e->gvocab == NULL || e->gmask == NULL || e->glogits == NULL) {
                LOG_WARN("engine: no grammar support (%s)", e->gvocab ? "out of memory" : err.msg);
                grammar_vocab_free(e->gvocab);
                e->gvocab = NULL;
                engine_tok_bytes_free(&e->tok_bytes);
            }
        }
        e->voc = v; /* kept for DRY's sequence breakers */
        return;
    }
    LOG_WARN("engine: no usable vocab (%s); end of generation = the GGUF's eos/eot ids", err.msg);
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id"};
    for (size_t i = 0; i < 2; i++) {
        int64_t id;
        if (gguf_get_int(e->m->g, keys[i], &id, NULL) == 0 && id >= 0 && id < e->n_vocab) {
            e->is_eog[id] = 1;
        }
    }
}

/* {arch}.pooling_type as llama.cpp numbers it: 1 mean, 2 cls, 3 last. */
static proto_pooling load_pooling(const model *m)
{
    char key[96];
    gguf_str arch = gguf_arch(m->g);
    snprintf(key, sizeof(key), "%.*s.pooling_type", (int)arch.len, arch.ptr);
    int64_t v;
    if (gguf_get_int(m->g, key, &v, NULL) == 0) {
        if (v == 2) return PROTO_POOLING_CLS;
        if (v == 3) return PROTO_POOLING_LAST;
    }
    return PROTO_POOLING_MEAN;
}

/* A draft model must speak the target's token ids: the same logits size
 * and, where the files list their tokens, the same text for every id. */
static int check_draft_vocab(const model *t, const model *d, strata_err *err)
{
    if (t->hp.n_vocab != d->hp.n_vocab) {
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: the draft model's vocabulary has %" PRId64
                              " tokens, the target's %" PRId64
                              ": a draft model must share the target's vocabulary",
                              d->hp.n_vocab, t->hp.n_vocab);
    }
    const gguf_value *ta = NULL, *da = NULL;
    bool t_has = gguf_get_arr(t->g, "tokenizer.ggml.tokens", &ta, NULL) == 0 &&
                 ta->v.arr.elem_type == GGUF_VTYPE_STRING;
    bool d_has = gguf_get_arr(d->g, "tokenizer.ggml.tokens", &da, NULL) == 0 &&
                 da->v.arr.elem_type == GGUF_VTYPE_STRING;
    if (t_has != d_has) {
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: the %s model lists its tokens (tokenizer.ggml.tokens) and "
                              "the %s model does not: their vocabularies cannot be compared",
                              t_has ? "target" : "draft", t_has ? "draft" : "target");
    }
    if (!t_has) return 0;
    if (ta->v.arr.n != da->v.arr.n) {
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: the draft model's tokenizer lists %" PRIu64
                              " tokens, the target's %" PRIu64
                              ": a draft model must share the target's vocabulary",
                              da->v.arr.n, ta->v.arr.n);
    }
    for (uint64_t i = 0; i < ta->v.arr.n; i++) {
        gguf_str a = ta->v.arr.strs[i], b = da->v.arr.strs[i];
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len) != 0) {
            return strata_err_set(err, STRATA_EINVAL,
                                  "engine: token %" PRIu64 " is \"%.*s\" in the target's "
                                  "vocabulary and \"%.*s\" in the draft model's: a draft model "
                                  "must share the target's vocabulary",
                                  i, (int)(a.len > 40 ? 40 : a.len), a.ptr,
                                  (int)(b.len > 40 ? 40 : b.len), b.ptr);
        }
    }
    return 0;
}

/* The draft model's context (engine.h "Draft model"): on the target's
 * pool, one sequence per slot, room for each slot's whole sequence and its
 * drafts, elastic in the target pool's steps. */
static int init_draft(engine *e, const engine_params *p, int64_t step_blocks, strata_err *err)
{
    int rc = check_draft_vocab(e->m, p->draft_model, err);
    if (rc != 0) return rc;
    const int64_t bt = e->kv->block_tokens;
    int64_t per_slot = (e->n_limit + e->draft_max + bt - 1) / bt * bt;
    e->d_pool_tokens = per_slot * e->n_slots;
    model_ctx_params cp = {.n_ctx = e->d_pool_tokens, .n_seq_max = e->n_slots,
                           .n_ctx_seq = e->n_ctx, .n_batch = e->n_batch, .n_threads = p->n_threads,
                           .pool = model_ctx_pool(e->ctx), .k_type = e->kv->k_type,
                           .v_type = e->kv->v_type};
    rc = model_ctx_init(&e->dctx, p->draft_model, &cp, err);
    if (rc == STRATA_EINVAL && cp.k_type == STRATA_TYPE_Q8_0) {
        /* a head size q8_0 rows do not fit: the draft keeps f16 rows */
        cp.k_type = cp.v_type = STRATA_TYPE_F16;
        rc = model_ctx_init(&e->dctx, p->draft_model, &cp, err);
    }
    if (rc != 0) return rc;
    e->dm = p->draft_model;
    e->dkv = model_ctx_kv(e->dctx);
    if (!e->kv_resident) {
        int64_t blocks = step_blocks < e->dkv->n_blocks ? step_blocks : e->dkv->n_blocks;
        rc = kv_pool_set_elastic(e->dkv, (int32_t)blocks, (int32_t)blocks, (double)e->kv_hold_ms,
                                 err);
        if (rc != 0) return rc;
    }
    size_t nb = (size_t)e->n_batch;
    e->d_tok = malloc(nb * sizeof(int32_t));
    e->d_seq = malloc(nb * sizeof(int32_t));
    e->d_pos = malloc(nb * sizeof(int32_t));
    e->d_want = malloc(nb);
    e->d_logits = malloc((size_t)e->n_slots * (size_t)e->n_vocab * sizeof(float));
    e->d_reqs = malloc((size_t)e->n_slots * sizeof(engine_req *));
    if (!e->d_tok || !e->d_seq || !e->d_pos || !e->d_want || !e->d_logits || !e->d_reqs) {
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for the draft's buffers");
    }
    const int64_t d_block_bytes = e->dkv->n_layer *
                                  (int64_t)(e->dkv->k_block_bytes + e->dkv->v_block_bytes);
    LOG_INFO("engine: draft model's KV: %" PRId64 " positions (%d slots), at most %.1f MiB, %s",
             (int64_t)e->dkv->n_blocks * bt, e->n_slots,
             (double)(d_block_bytes * e->dkv->n_blocks) / (1024.0 * 1024.0),
             e->kv_resident ? "committed as written" : "elastic as the target's pool");
    return 0;
}

int64_t engine_pool_tokens(const model *m, const engine_params *p, int n_slots, int64_t n_ctx)
{
    const int64_t bt = KV_BLOCK_TOKENS;
    if (p->kv_max_tokens < 0 || p->kv_max_bytes < 0 || p->kv_resident_tokens < 0) return 0;
    int64_t want = p->kv_resident_tokens > 0 ? p->kv_resident_tokens : p->kv_max_tokens;
    if (want > 0) {
        if (want > ((int64_t)1 << 31) - 4096) return 0;
        return (want + bt - 1) / bt * bt;
    }
    /* one block's bytes, from the geometry the model context will use */
    kv_cache_params kp = {.n_layer = m->hp.n_layer, .n_head_kv = m->hp.n_head_kv,
                          .head_dim = m->hp.head_dim, .head_dim_v = m->hp.head_dim_v,
                          .n_ctx = bt, .n_seq_max = 1, .k_type = p->kv_type,
                          .v_type = p->kv_type};
    int64_t block_bytes = (int64_t)kv_cache_pool_bytes(&kp);
    if (block_bytes <= 0) return 0;
    if (p->kv_max_bytes > 0) {
        int64_t blocks = p->kv_max_bytes / block_bytes;
        if (blocks < 1) blocks = 1;
        if (blocks > (((int64_t)1 << 31) - 4096) / bt) return 0;
        return blocks * bt;
    }
    /* The default: room for every slot's whole context, but no more than
     * ENGINE_DEFAULT_KV_MIB unless one context alone needs more. */
    int64_t per_slot = (n_ctx + bt - 1) / bt * bt;
    int64_t all = per_slot * n_slots;
    int64_t cap = ((int64_t)ENGINE_DEFAULT_KV_MIB << 20) / block_bytes * bt;
    if (cap < per_slot) cap = per_slot;
    return all < cap ? all : cap;
}

int engine_init(engine **out, const model *m, const engine_params *p, strata_err *err)
{
    *out = NULL;
    int n_slots = p->n_slots > 0 ? p->n_slots : ENGINE_DEFAULT_SLOTS;
    int64_t n_ctx = p->n_ctx;
    if (n_ctx <= 0) {
        n_ctx = ENGINE_DEFAULT_CTX;
        if (m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < n_ctx) n_ctx = m->hp.n_ctx_train;
    }
    int64_t n_batch = p->n_batch > 0 ? p->n_batch : ENGINE_DEFAULT_BATCH;
    if (n_batch < n_slots) n_batch = n_slots;
    if (n_slots > 4096 || n_ctx > ((int64_t)1 << 30) || n_batch > ((int64_t)1 << 20)) {
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: %d slots, context %" PRId64 ", batch %" PRId64
                              " (at most 4096, 2^30, 2^20)",
                              n_slots, n_ctx, n_batch);
    }
    engine *e = calloc(1, sizeof(*e));
    if (e == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    e->m = m;
    e->n_slots = n_slots;
    e->n_ctx = n_ctx;
    e->n_batch = n_batch;
    e->n_vocab = m->hp.n_vocab;
    e->n_embd = m->hp.n_embd;
    e->accepting = true;
    e->hang_at_step = p->hang_at_step > 0 ? p->hang_at_step : 0;
    if (p->draft_max < 0 || p->draft_max > SPEC_DRAFT_MAX_LIMIT || p->draft_min < 0 ||
        p->draft_p_min > 1.0f) {
        free(e);
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: --draft-max %d, --draft-min %d, --draft-p-min %g (max in "
                              "[0, %d], min >= 0, p-min <= 1)",
                              p->draft_max, p->draft_min, (double)p->draft_p_min,
                              SPEC_DRAFT_MAX_LIMIT);
    }
    if (p->draft_ngram && p->draft_model != NULL) {
        free(e);
        return strata_err_set(err, STRATA_EINVAL,
                              "engine: --draft-ngram and --draft-model are two draft sources: "
                              "give one");
    }
    e->draft_ngram = p->draft_ngram;
    e->draft_gate = p->draft_gate;
    e->test_step_ms = p->test_step_ms;
    e->draft_max = p->draft_max > 0 ? p->draft_max : SPEC_DEFAULT_DRAFT_MAX;
    e->draft_min = p->draft_min > 0 ? p->draft_min : 1;
    e->draft_p_min = p->draft_p_min == 0.0f ? SPEC_DEFAULT_P_MIN
                     : p->draft_p_min < 0.0f ? 0.0f : p->draft_p_min;
    pthread_mutex_init(&e->progress_lock, NULL);
    e->seed_state = (uint64_t)strata_clock_ns();
    snprintf(e->kv_type, sizeof(e->kv_type), "f16");
    snprintf(e->arch, sizeof(e->arch), "%s", m->hp.arch_name ? m->hp.arch_name : "?");
    /* The pool is shared by the slots and sized on its own (engine.h
     * "KV pool"): whole blocks, at least one. */
    int64_t pool_tokens = engine_pool_tokens(m, p, n_slots, n_ctx);
    if (pool_tokens <= 0) {
        pthread_mutex_destroy(&e->progress_lock);
        free(e);
        return strata_err_set(err, STRATA_EINVAL, "engine: the KV pool's size is invalid "
                              "(--kv-max %" PRId64 ", --kv-max-mib %" PRId64 ")",
                              p->kv_max_tokens, p->kv_max_bytes >> 20);
    }
    model_ctx_params cp = {.n_ctx = pool_tokens, .n_seq_max = n_slots, .n_ctx_seq = n_ctx,
                           .n_batch = n_batch, .n_threads = p->n_threads,
                           .k_type = p->kv_type, .v_type = p->kv_type};
    int rc = model_ctx_init(&e->ctx, m, &cp, err);
    if (rc != 0) {
        pthread_mutex_destroy(&e->progress_lock);
        free(e);
        return rc;
    }
    e->kv = model_ctx_kv(e->ctx);
    /* ready's kv.type: the type the rows really have */
    snprintf(e->kv_type, sizeof(e->kv_type), "%s",
             e->kv->k_type == STRATA_TYPE_Q8_0 ? "q8_0" : "f16");
    /* a block's bytes in the main pool (the layers that see everything);
     * sliding-window layers live in the smaller window pool (kv_cache.h) */
    const int64_t block_bytes = kv_main_block_bytes(e->kv) > 0
                                    ? (int64_t)kv_main_block_bytes(e->kv) : 1;
    e->kv_bytes = (int64_t)e->kv->n_blocks * block_bytes +
                  (int64_t)(e->kv->wk_map_bytes + e->kv->wv_map_bytes);
    e->n_pool_tokens = (int64_t)e->kv->n_blocks * e->kv->block_tokens;
    e->n_limit = n_ctx < e->n_pool_tokens ? n_ctx : e->n_pool_tokens;
    const int64_t bt = e->kv->block_tokens;
    int64_t step_blocks = e->kv->n_blocks;
    if (p->kv_resident_tokens > 0) {
        e->kv_resident = true;
        kv_pool_prefault(e->kv);
        e->kv_init_tokens = e->kv_step_tokens = e->n_pool_tokens;
    } else {
        int64_t step = p->kv_step_tokens > 0 ? p->kv_step_tokens : ENGINE_DEFAULT_KV_STEP;
        step_blocks = (step + bt - 1) / bt;
        if (step_blocks > e->kv->n_blocks) step_blocks = e->kv->n_blocks;
        int64_t init = p->kv_init_tokens > 0 ? p->kv_init_tokens : step_blocks * bt;
        int64_t init_blocks = (init + bt - 1) / bt;
        if (init_blocks > e->kv->n_blocks) init_blocks = e->kv->n_blocks;
        e->kv_hold_ms = p->kv_hold_ms >= 0 ? p->kv_hold_ms : ENGINE_DEFAULT_KV_HOLD_MS;
        rc = kv_pool_set_elastic(e->kv, (int32_t)step_blocks, (int32_t)init_blocks,
                                 (double)e->kv_hold_ms, err);
        if (rc != 0) {
            model_ctx_free(e->ctx);
            pthread_mutex_destroy(&e->progress_lock);
            free(e);
            return rc;
        }
        e->kv_step_tokens = step_blocks * bt;
        e->kv_init_tokens = (int64_t)e->kv->resident_steps * e->kv->step_blocks * bt;
        if (e->kv_init_tokens > e->n_pool_tokens) e->kv_init_tokens = e->n_pool_tokens;
    }
    e->prefix_on = !p->no_prefix_cache;
    e->prefix_min_tokens = p->prefix_min_tokens > e->kv->block_tokens ? p->prefix_min_tokens
                                                                      : e->kv->block_tokens;
    if (e->prefix_on) {
        int64_t budget = p->prefix_cache_bytes > 0 ? p->prefix_cache_bytes / block_bytes
                                                   : e->kv->n_blocks;
        e->cache_blocks = budget < e->kv->n_blocks ? budget : e->kv->n_blocks;
        rc = kv_prefix_enable(e->kv, (int32_t)e->cache_blocks, err);
        if (rc != 0) {
            model_ctx_free(e->ctx);
            pthread_mutex_destroy(&e->progress_lock);
            free(e);
            return rc;
        }
    }
    if (p->draft_model != NULL) {
        rc = init_draft(e, p, step_blocks, err);
        if (rc != 0) {
            engine_free(e);
            return rc;
        }
    }
    size_t nb = (size_t)n_batch;
    e->is_eog = calloc((size_t)e->n_vocab, 1);
    e->ban_logits = malloc((size_t)e->n_vocab * sizeof(float));
    e->slots = calloc((size_t)n_slots, sizeof(engine_req *));
    e->b_tok = malloc(nb * sizeof(int32_t));
    e->b_seq = malloc(nb * sizeof(int32_t));
    e->b_pos = malloc(nb * sizeof(int32_t));
    e->b_want = malloc(nb);
    e->b_want_embd = malloc(nb);
    e->b_reqs = malloc((size_t)n_slots * sizeof(engine_req *));
    e->b_prefill = malloc((size_t)n_slots * sizeof(engine_req *));
    e->vec = malloc((size_t)e->n_embd * sizeof(float));
    /* one row per slot, and one per draft token when speculating */
    bool speculates = e->draft_ngram || e->dctx != NULL;
    size_t logit_rows = (size_t)n_slots * (speculates ? 1 + (size_t)e->draft_max : 1);
    if (logit_rows > nb) logit_rows = nb;
    e->logits = malloc(logit_rows * (size_t)e->n_vocab * sizeof(float));
    e->logit_rows = logit_rows;
    e->embd = malloc(nb * (size_t)e->n_embd * sizeof(float));
    e->hist = malloc((size_t)n_slots * (size_t)n_ctx * sizeof(int32_t));
    if (!e->hist || !e->is_eog || !e->ban_logits || !e->slots || !e->b_tok || !e->b_seq || !e->b_pos || !e->b_want ||
        !e->b_want_embd || !e->b_reqs || !e->b_prefill || !e->vec || !e->logits || !e->embd) {
        engine_free(e);
        return strata_err_set(err, STRATA_ENOMEM, "engine: out of memory for its buffers");
    }
    load_eog(e);
    e->model_pooling = load_pooling(m);
    e->pg_committed_bytes = committed_bytes(e);
    *out = e;
    return 0;
}

static void req_free(engine_req *r)
{
    if (r == NULL) return;
    sampler_free(r->smp);
    grammar_state_free(r->gstate);
    grammar_free(r->gram);
    free(r->embd_sum);
    free(r->resume);
    proto_msg_free(&r->msg);
    free(r);
}

void engine_free(engine *e)
{
    if (e == NULL) return;
    for (int s = 0; e->slots != NULL && s < e->n_slots; s++) req_free(e->slots[s]);
    for (engine_req *r = e->queue_head; r != NULL;) {
        engine_req *next = r->next;
        req_free(r);
        r = next;
    }
    model_ctx_free(e->dctx); /* before the context whose pool it borrows */
    model_ctx_free(e->ctx);
    free(e->d_tok);
    free(e->d_seq);
    free(e->d_pos);
    free(e->d_want);
    free(e->d_logits);
    free(e->d_reqs);
    free(e->is_eog);
    free(e->ban_logits);
    vocab_free(e->voc);
    free(e->dry_br);
    grammar_vocab_free(e->gvocab);
    engine_tok_bytes_free(&e->tok_bytes);
    free(e->gmask);
    free(e->glogits);
    free(e->slots);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_pos);
    free(e->b_want);
    free(e->b_want_embd);
    free(e->b_reqs);
    free(e->b_prefill);
    free(e->vec);
    free(e->logits);
    free(e->plp_lp);
    free(e->plp_tops);
    free(e->embd);
    free(e->hist);
    pthread_mutex_destroy(&e->progress_lock);
    free(e);
}

void engine_ready(const engine *e, proto_msg *out)
{
    const kv_cache *kv = e->kv;
    memset(out, 0, sizeof(*out));
    out->op = PROTO_OP_READY;
    proto_ready *r = &out->u.ready;
    r->protocol = PROTOCOL_VERSION;
    r->arch = e->arch;
    r->n_ctx_train = e->m->hp.n_ctx_train;
    r->n_vocab = e->n_vocab;
    r->n_embd = e->n_embd;
    r->n_layer = e->m->hp.n_layer;
    r->slots = e->n_slots;
    r->n_ctx = e->n_ctx;
    r->n_batch = e->n_batch;
    r->kv_type = e->kv_type;
    r->kv_block_tokens = kv->block_tokens;
    r->kv_n_blocks = kv->n_blocks;
    r->kv_bytes = e->kv_bytes;
    r->kv_prefix_cache = e->prefix_on;
    if (e->prefix_on) {
        r->kv_cache_blocks = e->cache_blocks;
        r->kv_cache_bytes = e->cache_blocks * (int64_t)kv_main_block_bytes(kv);
        r->kv_cache_min_tokens = e->prefix_min_tokens;
    }
    r->kv_max_tokens = e->n_pool_tokens;
    r->kv_init_tokens = e->kv_init_tokens;
    r->kv_step_tokens = e->kv_step_tokens;
    r->kv_hold_ms = e->kv_hold_ms;
    r->kv_resident = e->kv_resident;
    if (e->draft_ngram || e->dctx != NULL) {
        r->draft_source = e->dctx != NULL ? "model" : "ngram";
        r->draft_max = e->draft_max;
        r->draft_min = e->draft_min;
        r->draft_p_min = e->draft_p_min;
    }
}

void engine_get_progress(engine *e, proto_pong *out)
{
    memset(out, 0, sizeof(*out));
    out->has_progress = true;
    out->has_kv = true;
    out->kv_blocks = e->kv->n_blocks; /* fixed at init */
    out->kv_bytes = e->kv_bytes;
    double now = strata_clock_ms();
    pthread_mutex_lock(&e->progress_lock);
    out->steps = e->pg_steps;
    out->running = e->pg_running;
    if (e->pg_running) {
        out->step_ms = now > e->pg_start_ms ? now - e->pg_start_ms : 0.0;
        out->step_tokens = e->pg_tokens;
    }
    for (int i = 0; i < e->pg_n_cost; i++) {
        if (e->pg_cost[i] > out->ms_per_token) out->ms_per_token = e->pg_cost[i];
    }
    out->kv_used = e->pg_kv_used;
    out->kv_cached = e->pg_kv_cached;
    out->kv_lookup_tokens = e->pg_lookup_tokens;
    out->kv_hit_tokens = e->pg_hit_tokens;
    out->kv_preemptions = e->pg_preemptions;
    out->kv_committed_bytes = e->pg_committed_bytes;
    pthread_mutex_unlock(&e->progress_lock);
}

void engine_set_end_hook(engine *e, engine_end_fn fn, void *ctx)
{
    e->on_end = fn;
    e->on_end_ctx = ctx;
}

bool engine_accepting(const engine *e)
{
    return e->accepting;
}

void engine_stop_accepting(engine *e)
{
    e->accepting = false;
}

bool engine_busy(const engine *e)
{
    return e->queue_head != NULL || engine_n_running(e) > 0;
}

void engine_trim(engine *e)
{
    /* idle (the loop calls this between steps only): the step buffers
     * go back with the KV steps */
    model_ctx_release_scratch(e->ctx);
    if (e->dctx != NULL) {
        model_ctx_release_scratch(e->dctx);
        kv_pool_trim(e->dkv, strata_clock_ms());
    }
    if (kv_pool_trim(e->kv, strata_clock_ms()) == 0) return;
    int64_t c = committed_bytes(e);
    pthread_mutex_lock(&e->progress_lock);
    e->pg_committed_bytes = c;
    pthread_mutex_unlock(&e->progress_lock);
}

double engine_next_trim_ms(const engine *e)
{
    double now = strata_clock_ms();
    double t = kv_pool_next_trim_ms(e->kv, now);
    if (e->dkv != NULL) {
        double d = kv_pool_next_trim_ms(e->dkv, now);
        if (d >= 0 && (t < 0 || d < t)) t = d;
    }
    return t;
}

int engine_n_running(const engine *e)
{
    int n = 0;
    for (int s = 0; s < e->n_slots; s++) n += e->slots[s] != NULL;
    return n;
}

int64_t engine_n_queued(const engine *e)
{
    return e->n_queued;
}

/* The pool's committed bytes: its committed steps' blocks (the last step
 * may be short), or all of it when resident. */
static int64_t committed_bytes(const engine *e)
{
    const kv_cache *kv = e->kv;
    if (e->kv_resident || kv->step_blocks <= 0) return e->kv_bytes;
    int64_t blocks = 0;
    for (int32_t st = 0; st < kv->n_steps; st++) {
        if (!kv->step_committed[st] && st >= kv->resident_steps) continue;
        int64_t b0 = (int64_t)st * kv->step_blocks, left = kv->n_blocks - b0;
        blocks += left < kv->step_blocks ? left : kv->step_blocks;
    }
    return blocks * (int64_t)kv_main_block_bytes(kv) + (int64_t)(kv->wk_map_bytes + kv->wv_map_bytes);
}

/* ---- output ---- */

/* Appends m; an encoding failure (out of memory) can only be logged. */
static void emit(proto_buf *out, const proto_msg *m)
{
    strata_err err;
    if (proto_encode(m, out, &err) != 0) LOG_ERROR("engine: %s", err.msg);
}

static void emit_err(proto_buf *out, bool has_id, int64_t id, const char *code,
                     const char *message)
{
    strata_err err;
    if (proto_encode_err(out, has_id ? id : -1, code, message, &err) != 0) {
        LOG_ERROR("engine: %s", err.msg);
    }
}

static engine_req *find_req(const engine *e, int64_t id)
{
    for (int s = 0; s < e->n_slots; s++) {
        if (e->slots[s] != NULL && e->slots[s]->id == id) return e->slots[s];
    }
    for (engine_req *r = e->queue_head; r != NULL; r = r->next) {
        if (r->id == id) return r;
    }
    return NULL;
}

/* Ends a running request: releases its slot and frees it. */
static void spec_settle(engine *e, engine_req *r);

static void release(engine *e, engine_req *r)
{
    if (r->slot >= 0) {
        spec_settle(e, r);
        kv_seq_remove(e->kv, r->slot);
        if (e->dkv != NULL) kv_seq_remove(e->dkv, r->slot);
        e->slots[r->slot] = NULL;
    }
    req_free(r);
}

static void finish(engine *e, engine_req *r, proto_finish f, proto_buf *out)
{
    double now = strata_clock_ms();
    proto_msg m = {.op = PROTO_OP_DONE, .has_id = true, .id = r->id};
    m.u.done.finish = f;
    proto_stats *s = &m.u.done.stats;
    int64_t evaluated = r->n_done < r->n_prompt ? r->n_done : r->n_prompt;
    s->prompt_n = evaluated > r->n_prompt_eval ? evaluated : r->n_prompt_eval;
    s->cached_n = r->n_cached;
    s->preempted = r->n_preempted;
    s->predicted_n = r->n_gen;
    s->draft_n = r->n_drafted;
    s->draft_accepted_n = r->n_draft_accepted;
    if (r->t_prompt_start >= 0) {
        double end = r->t_prompt_end >= 0 ? r->t_prompt_end : now;
        s->prompt_ms = end - r->t_prompt_start;
    }
    if (r->t_prompt_end >= 0) s->predicted_ms = now - r->t_prompt_end;
    emit(out, &m);
    if (e->on_end != NULL) e->on_end(e->on_end_ctx, r->id);
    LOG_DEBUG("engine: id %" PRId64 " %s: prompt %" PRId64 " in %.1f ms, %" PRId64
              " tokens in %.1f ms",
              r->id, proto_finish_name(f), s->prompt_n, s->prompt_ms, s->predicted_n,
              s->predicted_ms);
    release(e, r);
}

static void finish_err(engine *e, engine_req *r, const char *code, const char *message,
                       proto_buf *out)
{
    emit_err(out, true, r->id, code, message);
    if (e->on_end != NULL) e->on_end(e->on_end_ctx, r->id);
    release(e, r);
}

/* ---- arrival ---- */

/* The checks of engine.h's "admission"; fills message on failure. */
static bool check_request(const engine *e, const proto_msg *m, char *code_out,
                          size_t code_size, char *message, size_t message_size)
{
    const int32_t *toks = m->op == PROTO_OP_GEN ? m->u.gen.tokens : m->u.embed.tokens;
    size_t n = m->op == PROTO_OP_GEN ? m->u.gen.n_tokens : m->u.embed.n_tokens;
    const char *op = proto_op_name(m->op);
    snprintf(code_out, code_size, "%s", PROTO_ERR_BAD_REQUEST);
    for (size_t i = 0; i < n; i++) {
        if (toks[i] >= e->n_vocab) {
            snprintf(message, message_size,
                     "%s: tokens[%zu] = %" PRId32 " is outside the vocabulary [0, %" PRId64 ")",
                     op, i, toks[i], e->n_vocab);
            return false;
        }
    }
    int64_t n_prompt = (int64_t)n;
    if (m->op == PROTO_OP_EMBED) {
        if (n_prompt > e->n_ctx) {
            snprintf(code_out, code_size, "%s", PROTO_ERR_CONTEXT_LENGTH);
            snprintf(message, message_size,
                     "embed: the input is %" PRId64 " tokens; the context holds %" PRId64,
                     n_prompt, e->n_ctx);
            return false;
        }
        if (n_prompt > e->n_pool_tokens) {
            snprintf(code_out, code_size, "%s", PROTO_ERR_CONTEXT_LENGTH);
            snprintf(message, message_size,
                     "embed: the input is %" PRId64 " tokens; the whole KV pool holds %" PRId64
                     " (--kv-max)",
                     n_prompt, e->n_pool_tokens);
            return false;
        }
        return true;
    }
    const proto_gen *g = &m->u.gen;
    for (size_t i = 0; i < g->n_stop_tokens; i++) {
        if (g->stop_tokens[i] >= e->n_vocab) {
            snprintf(message, message_size,
                     "gen: stop_tokens[%zu] = %" PRId32 " is outside the vocabulary [0, %" PRId64
                     ")",
                     i, g->stop_tokens[i], e->n_vocab);
            return false;
        }
    }
    for (size_t i = 0; i < g->n_min_bans; i++) {
        if (g->min_bans[i] >= e->n_vocab) {
            snprintf(message, message_size,
                     "gen: min_bans[%zu] = %" PRId32 " is outside the vocabulary [0, %" PRId64 ")", i,
                     g->min_bans[i], e->n_vocab);
            return false;
        }
    }
    for (size_t i = 0, at = 0; i < g->n_bad; at += (size_t)g->bad_len[i++]) {
        for (int32_t k = 0; k < g->bad_len[i]; k++) {
            if (g->bad_ids[at + (size_t)k] >= e->n_vocab) {
                snprintf(message, message_size, "gen: bad_words[%zu] holds a token outside the vocabulary", i);
                return false;
            }
        }
    }
    for (size_t i = 0; i < g->n_allowed_tokens; i++) {
        if (g->allowed_tokens[i] >= e->n_vocab) {
            snprintf(message, message_size,
                     "gen: allowed_tokens[%zu] = %" PRId32 " is outside the vocabulary [0, %" PRId64 ")", i,
                     g->allowed_tokens[i], e->n_vocab);
            return false;
        }
    }
    for (size_t i = 0; i < g->sampling.n_logit_bias; i++) {
        if (g->sampling.logit_bias[i].token >= e->n_vocab) {
            snprintf(message, message_size,
                     "gen: sampling.logit_bias names token %" PRId32
                     ", outside the vocabulary [0, %" PRId64 ")",
                     g->sampling.logit_bias[i].token, e->n_vocab);
            return false;
        }
    }
    /* prompt + max_tokens <= n_ctx; with no max, room for one token at least */
    int64_t want = g->max_tokens >= 0 ? g->max_tokens : 1;
    if (n_prompt > e->n_ctx || want > e->n_ctx - n_prompt) {
        snprintf(code_out, code_size, "%s", PROTO_ERR_CONTEXT_LENGTH);
        if (g->max_tokens >= 0) {
            snprintf(message, message_size,
                     "gen: the prompt (%" PRId64 " tokens) plus max_tokens (%" PRId64
                     ") is more than the context of %" PRId64 " tokens",
                     n_prompt, g->max_tokens, e->n_ctx);
        } else {
            snprintf(message, message_size,
                     "gen: the prompt (%" PRId64 " tokens) leaves no room to generate in the "
                     "context of %" PRId64 " tokens",
                     n_prompt, e->n_ctx);
        }
        return false;
    }
    if (n_prompt + want > e->n_pool_tokens) {
        /* it could not run even alone with the whole pool */
        snprintf(code_out, code_size, "%s", PROTO_ERR_CONTEXT_LENGTH);
        snprintf(message, message_size,
                 "gen: the prompt (%" PRId64 " tokens) plus max_tokens (%" PRId64
                 ") is more than the whole KV pool of %" PRId64 " tokens (--kv-max)",
                 n_prompt, want, e->n_pool_tokens);
        return false;
    }
    return true;
}

static void enqueue(engine *e, proto_msg *m)
{
    engine_req *r = calloc(1, sizeof(*r));
    if (r == NULL) return; /* the caller checked; see engine_handle */
    r->id = m->id;
    r->msg = *m;
    memset(m, 0, sizeof(*m)); /* the request owns the arrays now */
    r->is_embed = r->msg.op == PROTO_OP_EMBED;
    if (r->is_embed) {
        r->prompt = r->msg.u.embed.tokens;
        r->n_prompt = (int64_t)r->msg.u.embed.n_tokens;
        r->max_tokens = 0;
        r->logprobs = -1;
        r->pooling = r->msg.u.embed.pooling != PROTO_POOLING_DEFAULT ? r->msg.u.embed.pooling
                                                                    : e->model_pooling;
        r->use_cache = e->prefix_on && !r->msg.u.embed.no_cache;
    } else {
        r->prompt = r->msg.u.gen.tokens;
        r->n_prompt = (int64_t)r->msg.u.gen.n_tokens;
        r->max_tokens = r->msg.u.gen.max_tokens;
        r->logprobs = r->msg.u.gen.logprobs;
        r->plp = r->msg.u.gen.prompt_logprobs;
        r->plp_top = r->msg.u.gen.prompt_top;
        r->use_cache = e->prefix_on && !r->msg.u.gen.no_cache;
        r->spec = (e->draft_ngram || e->dctx != NULL) && !r->msg.u.gen.no_speculative &&
                  !(r->msg.u.gen.has_draft_max && r->msg.u.gen.draft_max == 0);
    }
    r->spec_keep = -1;
    r->n_fill = r->n_prompt;
    r->state = REQ_QUEUED;
    r->slot = -1;
    r->order = -1;
    r->t_prompt_start = r->t_prompt_end = -1.0;
    if (e->queue_tail != NULL) e->queue_tail->next = r;
    else e->queue_head = r;
    e->queue_tail = r;
    e->n_queued++;
}

void engine_handle(engine *e, proto_msg *m, proto_buf *out)
{
    switch (m->op) {
    case PROTO_OP_PING: {
        proto_msg pong = {.op = PROTO_OP_PONG, .has_id = true, .id = m->id};
        engine_get_progress(e, &pong.u.pong);
        emit(out, &pong);
        return;
    }
    case PROTO_OP_STOP: {
        engine_req *r = find_req(e, m->id);
        if (r != NULL) r->cancelled = true;
        return;
    }
    case PROTO_OP_SHUTDOWN: e->accepting = false; return;
    case PROTO_OP_GEN:
    case PROTO_OP_EMBED: break;
    default: {
        char msg[96];
        snprintf(msg, sizeof(msg), "the engine does not take \"%s\"", proto_op_name(m->op));
        emit_err(out, false, 0, PROTO_ERR_UNKNOWN_OP, msg);
        return;
    }
    }
    char code[32], message[320];
    if (find_req(e, m->id) != NULL) {
        /* Answering with the id would end the request that has it. */
        snprintf(message, sizeof(message), "%s: id %" PRId64 " is already in flight",
                 proto_op_name(m->op), m->id);
        emit_err(out, false, 0, PROTO_ERR_DUPLICATE_ID, message);
        return;
    }
    if (!e->accepting) {
        snprintf(message, sizeof(message), "%s: the engine is shutting down",
                 proto_op_name(m->op));
        emit_err(out, true, m->id, PROTO_ERR_SHUTTING_DOWN, message);
        if (e->on_end != NULL) e->on_end(e->on_end_ctx, m->id);
        return;
    }
    if (!check_request(e, m, code, sizeof(code), message, sizeof(message))) {
        emit_err(out, true, m->id, code, message);
        if (e->on_end != NULL) e->on_end(e->on_end_ctx, m->id);
        return;
    }
    int64_t id = m->id;
    /* A grammar is compiled on arrival, so that a bad one is refused at once. */
    grammar *gram = NULL;
    grammar_state *gstate = NULL;
    if (m->op == PROTO_OP_GEN && m->u.gen.grammar != NULL) {
        strata_err gerr;
        int grc;
        if (e->gvocab == NULL) {
            grc = strata_err_set(&gerr, STRATA_EINVAL,
                                 "gen: grammar: this model has no vocabulary to apply it with");
        } else {
            grc = grammar_parse(&gram, m->u.gen.grammar, strlen(m->u.gen.grammar), &gerr);
            if (grc == 0) grc = grammar_state_new(&gstate, gram, &gerr);
        }
        if (grc != 0) {
            grammar_free(gram);
            emit_err(out, true, id, grc == STRATA_ENOMEM ? PROTO_ERR_INTERNAL : PROTO_ERR_BAD_GRAMMAR,
                     gerr.msg);
            if (e->on_end != NULL) e->on_end(e->on_end_ctx, id);
            return;
        }
    }
    int64_t before = e->n_queued;
    enqueue(e, m);
    if (e->n_queued == before) {
        grammar_state_free(gstate);
        grammar_free(gram);
        emit_err(out, true, id, PROTO_ERR_INTERNAL, "out of memory for the request");
        if (e->on_end != NULL) e->on_end(e->on_end_ctx, id);
        return;
    }
    e->queue_tail->gram = gram;
    e->queue_tail->gstate = gstate;
}

void engine_handle_bad_line(engine *e, const char *code, bool has_id, int64_t id,
                            const char *message, proto_buf *out)
{
    if (has_id && find_req(e, id) != NULL) {
        char msg[PROTO_ERROR_MSG_MAX + 64];
        snprintf(msg, sizeof(msg), "a line naming id %" PRId64 " (in flight, left running): %s",
                 id, message);
        emit_err(out, false, 0, code, msg);
        return;
    }
    emit_err(out, has_id, id, code, message);
    if (has_id && e->on_end != NULL) e->on_end(e->on_end_ctx, id);
}

/* ---- admission into slots ---- */

static uint64_t pick_seed(engine *e, int64_t id)
{
    e->seed_state ^= (uint64_t)id * 0x9e3779b97f4a7c15ULL;
    return strata_splitmix64(&e->seed_state) & (uint64_t)INT64_MAX;
}

/* DRY's restart sequences for the breaker strings of ps, from a one-entry
 * cache (clients send the same breakers with every request). */
static int dry_breakers_for(engine *e, const proto_sampling *ps, const sample_dry_breaker **out,
                            size_t *n_out, strata_err *err)
{
    char key[sizeof(e->dry_key)];
    size_t kl = 0;
    for (size_t i = 0; i < ps->n_dry_breakers && i < PROTO_MAX_DRY_BREAKERS; i++) {
        size_t l = strlen(ps->dry_breakers[i]);
        memcpy(key + kl, ps->dry_breakers[i], l + 1); /* NUL-separated */
        kl += l + 1;
    }
    key[kl] = '\0';
    if (!e->dry_cached || memcmp(key, e->dry_key, kl + 1) != 0) {
        const char *strs[PROTO_MAX_DRY_BREAKERS];
        for (size_t i = 0; i < ps->n_dry_breakers && i < PROTO_MAX_DRY_BREAKERS; i++) strs[i] = ps->dry_breakers[i];
        sample_dry_breaker *br = NULL;
        size_t n = 0;
        if (e->voc != NULL) {
            int rc = engine_dry_breakers(e->voc, strs, ps->n_dry_breakers, &br, &n, err);
            if (rc != 0) return rc;
        }
        free(e->dry_br);
        e->dry_br = br;
        e->n_dry_br = n;
        memcpy(e->dry_key, key, kl + 1);
        e->dry_cached = true;
    }
    *out = e->dry_br;
    *n_out = e->n_dry_br;
    return 0;
}

/* Gives r slot s: its sampler or pooling buffer (kept from its first
 * admission when it was preempted), a KV sequence started from the prefix
 * cache. */
/* The prompt tokens a request may look up in the prefix cache: 0 for none.
 * Mean and cls pooling need hidden states the cache does not keep; prompt
 * logprobs need the logits of every position not yet reported (after a
 * preemption the reported ones may come from the cache: at most plp_next
 * tokens are then reused). */
static int64_t reuse_span(const engine_req *r)
{
    if (!r->use_cache || (r->is_embed && r->pooling != PROTO_POOLING_LAST)) return 0;
    if (r->plp && r->plp_next < r->n_prompt - 1) return r->plp_next > 0 ? r->plp_next + 1 : 0;
    return r->n_fill;
}

/* Once per engine, at the first prompt_logprobs request: PROTO_PLP_CHUNK
 * more rows of logits (no more than the batch holds) and one `plp` line's
 * entries. */
static int grow_for_plp(engine *e, strata_err *err)
{
    if (e->plp_ready) return 0;
    size_t rows = e->logit_rows + PROTO_PLP_CHUNK;
    if (rows > (size_t)e->n_batch) rows = (size_t)e->n_batch;
    float *l = realloc(e->logits, rows * (size_t)e->n_vocab * sizeof(float));
    if (l == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory for prompt logprobs");
    e->logits = l;
    e->logit_rows = rows;
    e->plp_lp = malloc(PROTO_PLP_CHUNK * sizeof(proto_logprob));
    e->plp_tops = malloc((size_t)PROTO_PLP_CHUNK * PROTO_MAX_LOGPROBS * sizeof(proto_top));
    if (e->plp_lp == NULL || e->plp_tops == NULL) {
        free(e->plp_lp);
        free(e->plp_tops);
        e->plp_lp = NULL;
        e->plp_tops = NULL;
        return strata_err_set(err, STRATA_ENOMEM, "out of memory for prompt logprobs");
    }
    e->plp_ready = true;
    return 0;
}

static int admit(engine *e, engine_req *r, int s, strata_err *err)
{
    if (r->plp) {
        int rc = grow_for_plp(e, err);
        if (rc != 0) return rc;
    }
    if (r->is_embed) {
        if (r->embd_sum == NULL) r->embd_sum = calloc((size_t)e->n_embd, sizeof(double));
        if (r->embd_sum == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
    } else if (r->smp == NULL) {
        const proto_gen *g = &r->msg.u.gen;
        const proto_sampling *ps = &g->sampling;
        sample_params sp = {
            .temperature = ps->temperature, .top_k = ps->top_k, .top_p = ps->top_p,
            .min_p = ps->min_p, .typical_p = ps->typical_p, .repeat_penalty = ps->repeat_penalty,
            .presence_penalty = ps->presence_penalty,
            .frequency_penalty = ps->frequency_penalty, .penalty_last_n = ps->penalty_last_n,
            .top_n_sigma = ps->top_n_sigma, .xtc_probability = ps->xtc_probability,
            .xtc_threshold = ps->xtc_threshold, .dynatemp_range = ps->dynatemp_range,
            .dynatemp_exponent = ps->dynatemp_exponent, .mirostat = ps->mirostat,
            .mirostat_tau = ps->mirostat_tau, .mirostat_eta = ps->mirostat_eta,
            .dry_multiplier = ps->dry_multiplier, .dry_base = ps->dry_base,
            .dry_allowed_length = ps->dry_allowed_length, .dry_penalty_last_n = ps->dry_penalty_last_n,
            .seed = ps->has_seed ? ps->seed : pick_seed(e, r->id),
        };
        /* proto_bias and sample_bias have the same fields; copy to be safe */
        sample_bias *bias = NULL;
        if (ps->n_logit_bias > 0) {
            bias = malloc(ps->n_logit_bias * sizeof(sample_bias));
            if (bias == NULL) return strata_err_set(err, STRATA_ENOMEM, "out of memory");
            for (size_t i = 0; i < ps->n_logit_bias; i++) {
                bias[i].token = ps->logit_bias[i].token;
                bias[i].bias = ps->logit_bias[i].bias;
            }
        }
        sp.bias = bias;
        sp.n_bias = ps->n_logit_bias;
        if (ps->dry_multiplier != 0 && ps->dry_base >= 1 && ps->dry_penalty_last_n > 0) {
            int rc = dry_breakers_for(e, ps, &sp.dry_breakers, &sp.n_dry_breakers, err);
            if (rc != 0) {
                free(bias);
                return rc;
            }
        }
        int rc = sampler_new(&r->smp, &sp, (int32_t)e->n_vocab, err);
        free(bias); /* sampler_new copies it */
        if (rc != 0) return rc;
        /* The penalties (and DRY) look at the last penalty_last_n (and
         * dry_penalty_last_n) tokens of the whole sequence, prompt included,
         * as llama.cpp's server and command line feed their samplers. */
        int64_t window = ps->penalty_last_n > ps->dry_penalty_last_n || ps->dry_multiplier == 0
                             ? ps->penalty_last_n : ps->dry_penalty_last_n;
        int64_t from = r->n_prompt - window;
        for (int64_t i = from > 0 ? from : 0; i < r->n_prompt; i++) sampler_accept(r->smp, r->prompt[i]);
    }
    int rc = kv_seq_add(e->kv, s, err);
    if (rc != 0) return rc;
    /* check_request bounds the prompt by n_ctx; n_fill < n_limit <= n_ctx */
    int32_t *row = e->hist + (size_t)s * (size_t)e->n_ctx;
    memcpy(row, r->resume != NULL ? r->resume : r->prompt, (size_t)r->n_fill * sizeof(int32_t));
    r->n_done = 0;
    int64_t span = reuse_span(r);
    if (span > 0) {
        int64_t reused = 0;
        rc = kv_seq_reuse_prefix(e->kv, s, row, span, e->prefix_min_tokens, &reused, err);
        if (rc != 0) {
            kv_seq_remove(e->kv, s);
            return rc;
        }
        /* cached_n is the first admission's: what the request's prompt found */
        if (r->n_preempted == 0) r->n_cached = reused;
        r->n_done = reused;
    }
    if (e->dkv != NULL && r->spec) {
        rc = kv_seq_add(e->dkv, s, err);
        if (rc != 0) {
            kv_seq_remove(e->kv, s);
            return rc;
        }
        r->d_len = 0;
    }
    r->slot = s;
    r->state = REQ_PREFILL;
    if (r->order < 0) r->order = e->n_admitted++;
    e->slots[s] = r;
    return 0;
}

/* ---- the pool's blocks: admission, planning, preemption ---- */

/* Blocks a running request takes from the pool in its next step (its
 * pending token, or its next prompt chunk at most n_batch long). */
static int32_t step_blocks(const engine *e, const engine_req *r)
{
    if (r->state == REQ_DECODE) return kv_seq_blocks_needed(e->kv, r->slot, r->n_prompt + r->n_gen);
    int64_t end = r->n_done + e->n_batch < r->n_fill ? r->n_done + e->n_batch : r->n_fill;
    return kv_seq_blocks_needed(e->kv, r->slot, end);
}

static int64_t running_blocks(const engine *e)
{
    int64_t n = 0;
    for (int s = 0; s < e->n_slots; s++) {
        if (e->slots[s] != NULL) n += step_blocks(e, e->slots[s]);
    }
    return n;
}

/* An estimate of the blocks a queued request's first chunk takes, after
 * what the prefix cache gives it (kv_prefix_match changes nothing). */
static int64_t first_chunk_blocks(const engine *e, const engine_req *r)
{
    const int64_t bt = e->kv->block_tokens;
    int64_t start = 0, span = reuse_span(r);
    if (span > 0) {
        const int32_t *toks = r->resume != NULL ? r->resume : r->prompt;
        int64_t m = kv_prefix_match(e->kv, toks, span);
        if (m >= e->prefix_min_tokens) start = m < span ? m : span - 1;
    }
    int64_t end = start + e->n_batch < r->n_fill ? start + e->n_batch : r->n_fill;
    return (end + bt - 1) / bt - start / bt;
}

/* Takes r's blocks back (publishing came at every step, so its full blocks
 * stay cached, idle) and puts it at the head of the queue with what it
 * needs to resume: its sampler, its generated tokens (prompt + generated
 * become the positions to prefill again; the last one, sent and pending,
 * is fed last, and its logits continue the sampling exactly where they
 * were). An embed starts its pooling over. */
static void preempt(engine *e, engine_req *r)
{
    int s = r->slot;
    int64_t evaluated = r->n_done < r->n_prompt ? r->n_done : r->n_prompt;
    if (evaluated > r->n_prompt_eval) r->n_prompt_eval = evaluated;
    if (!r->is_embed && r->n_gen > 0) {
        int64_t n = r->n_prompt + r->n_gen;
        int32_t *buf = realloc(r->resume, (size_t)n * sizeof(int32_t));
        if (buf == NULL) {
            /* ended by admit_queued: freeing it here would leave plan_step
             * holding a dangling pointer */
            r->resume_oom = true;
        } else {
            memcpy(buf, e->hist + (size_t)s * (size_t)e->n_ctx, (size_t)n * sizeof(int32_t));
            r->resume = buf;
            r->n_fill = n;
        }
    }
    if (r->is_embed) {
        memset(r->embd_sum, 0, (size_t)e->n_embd * sizeof(double));
        r->n_pooled = 0;
    }
    kv_seq_remove(e->kv, s);
    if (e->dkv != NULL) kv_seq_remove(e->dkv, s); /* recomputed from the start when resumed */
    r->d_len = 0;
    e->slots[s] = NULL;
    r->slot = -1;
    r->n_done = 0;
    r->step_n = 0;
    r->state = REQ_QUEUED;
    r->n_preempted++;
    e->n_preemptions++;
    r->next = e->queue_head;
    e->queue_head = r;
    if (e->queue_tail == NULL) e->queue_tail = r;
    e->n_queued++;
    LOG_DEBUG("engine: id %" PRId64 " preempted (%" PRId64 " positions to resume)", r->id,
              r->n_fill);
}

/* Frees blocks until `need` more than `reserved` are free, by preempting
 * the youngest running requests younger than r (never r, never an older
 * one, so the oldest request always progresses). False when they are not
 * enough. */
static bool make_room(engine *e, const engine_req *r, int64_t need, int64_t reserved)
{
    while (need > (int64_t)kv_free_blocks(e->kv) - reserved) {
        engine_req *victim = NULL;
        for (int s = 0; s < e->n_slots; s++) {
            engine_req *v = e->slots[s];
            if (v == NULL || v == r || v->order <= r->order) continue;
            if (victim == NULL || v->order > victim->order) victim = v;
        }
        if (victim == NULL) return false;
        preempt(e, victim);
    }
    return true;
}

/* The most drafts decoding r may add this step with tok_left tokens of the
 * budget left: the engine's and the request's draft_max, the context, and
 * its max_tokens (a request that may send only k more tokens verifies
 * k - 1 drafts). */
static int64_t spec_cap(const engine *e, const engine_req *r, int64_t tok_left)
{
    int64_t len = r->n_prompt + r->n_gen; /* positions after this step without drafts */
    int64_t cap = e->draft_max;
    if (r->msg.u.gen.has_draft_max && r->msg.u.gen.draft_max < cap) cap = r->msg.u.gen.draft_max;
    if (cap > tok_left) cap = tok_left;
    if (cap > e->n_limit - len) cap = e->n_limit - len;
    if (r->max_tokens >= 0 && cap > r->max_tokens - r->n_gen - 1) cap = r->max_tokens - r->n_gen - 1;
    return cap;
}

/* The cost gate (spec.h "Cost gate"): the drafts r may propose this step
 * out of cap (0: none). draft_ms as for spec_cost_pick. */
static int64_t spec_gate(engine *e, engine_req *r, int64_t cap, double draft_ms)
{
    if (!e->draft_gate) return cap;
    double p = spec_accept_p(&e->cost, &r->acc_est);
    int k = spec_cost_pick(&e->cost, e->plan_n0, e->plan_out, p, draft_ms, (int)cap,
                           e->draft_min);
    if (k == 0) spec_accept_idle(&r->acc_est);
    if (k < cap && strata_log_enabled(STRATA_LOG_DEBUG)) {
        double t0 = 0.0, tk = 0.0;
        spec_cost_time(&e->cost, e->plan_n0, e->plan_n0 - cap, e->plan_n0 + cap, &t0);
        spec_cost_time(&e->cost, e->plan_n0 + cap, e->plan_n0 - cap, e->plan_n0 + cap, &tk);
        LOG_DEBUG("engine: request %" PRId64 ": cost gate %d of %" PRId64
                  " drafts (acceptance %.2f; step of %" PRId64 " tokens %.3f ms, of %" PRId64
                  " %.3f ms; draft %.3f ms)",
                  r->id, k, cap, p, e->plan_n0, t0, e->plan_n0 + cap, tk,
                  draft_ms < 0.0 ? e->cost.d_ms : draft_ms);
    }
    return k;
}

/* Appends toks[0, n) at positions pos0.. of r's draft sequence to the
 * draft batch at *n_b, asking for the last one's logits when want. */
static void draft_add(engine *e, const engine_req *r, const int32_t *toks, int64_t pos0,
                      int64_t n, bool want, int64_t *n_b)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t k = *n_b + i;
        e->d_tok[k] = toks[i];
        e->d_seq[k] = r->slot;
        e->d_pos[k] = (int32_t)(pos0 + i);
        e->d_want[k] = want && i == n - 1;
    }
    *n_b += n;
}

/* Runs the draft batch; on failure the sequences in it start over (their
 * draft KV is in an unknown state) and false is returned. */
static bool draft_forward(engine *e, int64_t n_b)
{
    model_batch b = {.n_tokens = n_b, .tokens = e->d_tok, .seq_ids = e->d_seq, .pos = e->d_pos,
                     .want_logits = e->d_want};
    strata_err err;
    const double t0 = strata_clock_ms();
    if (model_forward(e->dctx, &b, e->d_logits, &err) == 0) {
        double ms = e->test_step_ms ? e->test_step_ms(n_b, true) : strata_clock_ms() - t0;
        spec_cost_draft(&e->cost, n_b, ms);
        return true;
    }
    LOG_ERROR("engine: the draft model's forward pass of %" PRId64 " tokens failed: %s", n_b,
              err.msg);
    for (int64_t k = 0; k < n_b; k++) {
        engine_req *r = e->slots[e->d_seq[k]];
        if (r == NULL || !kv_seq_active(e->dkv, r->slot)) continue;
        kv_seq_remove(e->dkv, r->slot);
        if (kv_seq_add(e->dkv, r->slot, &err) != 0) r->spec = false; /* cannot happen */
        r->d_len = 0;
        r->d_fed = 0;
    }
    return false;
}

/* The draft's greedy choice from one row of its logits, and whether its
 * softmax probability reaches draft_p_min. */
static bool draft_pick(const engine *e, const float *row, int32_t *tok)
{
    int64_t best = 0;
    for (int64_t t = 1; t < e->n_vocab; t++) {
        if (row[t] > row[best]) best = t;
    }
    *tok = (int32_t)best;
    if (!(e->draft_p_min > 0.0f)) return true;
    /* p = exp(l_best) / sum exp(l_t) = 1 / sum exp(l_t - l_best) >= p_min
     * iff the sum stays <= 1 / p_min: the scan stops once it is past that
     * (a flat softmax is refused after a few terms) */
    const double limit = 1.0 / (double)e->draft_p_min, mx = (double)row[best];
    double sum = 0.0;
    for (int64_t t = 0; t < e->n_vocab && sum <= limit; t++) sum += exp((double)row[t] - mx);
    return sum <= limit;
}

/* The draft model's proposals for this step (engine.h "Draft model"), ord
 * being the running requests oldest first. Decoding sequences that may
 * draft feed what their draft sequence lacks and get their first draft
 * from one forward, which also carries the draft's share of this step's
 * prompt chunks; then one forward per further draft token. tok_left and
 * reserved are the step's budget and blocks left after the normal share;
 * each drafting sequence reserves its whole cap. */
static void draft_model_propose(engine *e, engine_req **ord, int n, int64_t tok_left,
                                int64_t reserved)
{
    int64_t budget = e->n_batch, n_b = 0;
    int n_act = 0;
    engine_req **act = e->d_reqs;
    for (int i = 0; i < n; i++) {
        engine_req *r = ord[i];
        r->d_cap = 0;
        r->d_fed = 0;
        r->d_lagging = false;
        if (r->slot < 0 || !r->spec || r->state != REQ_DECODE || r->step_n != 1) continue;
        int64_t cap = spec_cap(e, r, tok_left);
        if (cap < e->draft_min || spec_throttle_skip(&r->thr)) continue;
        cap = spec_throttle_cap(&r->thr, cap, e->draft_min);
        cap = spec_gate(e, r, cap, -1.0);
        if (cap < e->draft_min) continue;
        int64_t len = r->n_prompt + r->n_gen;
        int64_t lag = len - r->d_len; /* >= 1: the pending token is never in it */
        if (lag <= 0) continue;       /* (so this cannot happen) */
        if (lag > budget) {
            r->d_lagging = true; /* fed below as far as the budget goes; drafts later */
            continue;
        }
        int64_t extra = 0;
        int fit = spec_fit_blocks(e->kv, r->slot, len, (int)cap,
                                  (int64_t)kv_free_blocks(e->kv) - reserved, &extra);
        if (fit < e->draft_min) continue;
        reserved += extra;
        tok_left -= fit;
        e->plan_n0 += fit;
        r->d_cap = fit;
        r->d_row = n_act;
        const int32_t *row = e->hist + (size_t)r->slot * (size_t)e->n_ctx;
        draft_add(e, r, row + r->d_len, r->d_len, lag, true, &n_b);
        budget -= lag;
        act[n_act++] = r;
    }
    /* the draft's prompt chunks (as far as the target's this step) and the
     * catch-up of sequences that lack more than the budget, oldest first */
    for (int i = 0; i < n && budget > 0; i++) {
        engine_req *r = ord[i];
        if (r->slot < 0 || !r->spec || r->d_cap > 0) continue;
        int64_t upto;
        if (r->state == REQ_PREFILL) upto = r->n_done + r->step_n;
        else if (r->d_lagging) upto = r->n_prompt + r->n_gen;
        else continue;
        int64_t take = upto - r->d_len < budget ? upto - r->d_len : budget;
        if (take <= 0) continue;
        const int32_t *row = e->hist + (size_t)r->slot * (size_t)e->n_ctx;
        draft_add(e, r, row + r->d_len, r->d_len, take, false, &n_b);
        budget -= take;
    }
    /* a forward runs anyway: the other decoding sequences catch up in it
     * too (a few tokens each, nearly free in a pass that streams the
     * weights once), so that they can draft at once when they may again */
    for (int i = 0; i < n && budget > 0 && n_b > 0; i++) {
        engine_req *r = ord[i];
        if (r->slot < 0 || !r->spec || r->d_cap > 0 || r->d_lagging || r->state != REQ_DECODE) {
            continue;
        }
        int64_t lag = r->n_prompt + r->n_gen - r->d_len;
        int64_t take = lag < budget ? lag : budget;
        if (take <= 0) continue;
        const int32_t *row = e->hist + (size_t)r->slot * (size_t)e->n_ctx;
        draft_add(e, r, row + r->d_len, r->d_len, take, false, &n_b);
        budget -= take;
    }
    if (n_b == 0) return;
    /* every sequence of the batch holds its fed tokens once it ran */
    if (!draft_forward(e, n_b)) return;
    for (int64_t k = 0; k < n_b; k++) e->slots[e->d_seq[k]]->d_len++;
    /* drafts: row d_row of the last forward continues sequence act[a] */
    int n_live = n_act;
    while (n_live > 0) {
        n_b = 0;
        int n_rows = 0;
        for (int a = 0; a < n_act; a++) {
            engine_req *r = act[a];
            if (r->d_row < 0) continue;
            int32_t tok;
            bool ok = draft_pick(e, e->d_logits + r->d_row * e->n_vocab, &tok);
            r->d_row = -1;
            n_live--;
            if (!ok) continue;
            r->draft[r->step_draft++] = tok;
            if (r->step_draft >= r->d_cap || e->is_eog[tok]) continue;
            /* feed it for the next one: position len + step_draft - 1 */
            int64_t pos = r->n_prompt + r->n_gen + r->step_draft - 1;
            draft_add(e, r, &tok, pos, 1, true, &n_b);
            r->d_fed++;
            r->d_row = n_rows++;
            n_live++;
        }
        if (n_b == 0) break;
        if (!draft_forward(e, n_b)) {
            for (int a = 0; a < n_act; a++) act[a]->step_draft = 0, act[a]->d_row = -1;
            break;
        }
    }
    for (int a = 0; a < n_act; a++) {
        engine_req *r = act[a];
        if (r->step_draft >= e->draft_min) continue;
        /* too few: none, and the draft forwards were for nothing */
        r->step_draft = 0;
        kv_seq_truncate(e->dkv, r->slot, r->d_len);
        r->d_fed = 0;
        spec_throttle_round(&r->thr, false);
    }
}

/* Sets step_n, the tokens each running request feeds this step, oldest
 * first: a decoding one 1, a prefilling one its next chunk within the
 * token budget; each gets its blocks, preempting younger requests when the
 * pool has too few; one that still has none feeds nothing this step (it
 * waits for older ones to end). */
static void plan_step(engine *e)
{
    engine_req **ord = e->b_prefill;
    int n = 0, n_dec = 0;
    for (int s = 0; s < e->n_slots; s++) {
        engine_req *r = e->slots[s];
        if (r == NULL) continue;
        r->step_n = 0;
        r->step_draft = 0;
        n_dec += r->state == REQ_DECODE;
        int i = n++;
        while (i > 0 && ord[i - 1]->order > r->order) {
            ord[i] = ord[i - 1];
            i--;
        }
        ord[i] = r;
    }
    int64_t tok_left = e->n_batch - n_dec, reserved = 0;
    int64_t plp_left = PROTO_PLP_CHUNK; /* rows of prompt logprobs this step */
    const int64_t bt = e->kv->block_tokens;
    for (int i = 0; i < n; i++) {
        engine_req *r = ord[i];
        if (r->slot < 0) continue; /* preempted by an older one in this loop */
        if (r->state == REQ_DECODE) {
            int64_t need = kv_seq_blocks_needed(e->kv, r->slot, r->n_prompt + r->n_gen);
            if (!make_room(e, r, need, reserved)) continue;
            reserved += need;
            r->step_n = 1;
            continue;
        }
        int64_t take = r->n_fill - r->n_done;
        if (take > tok_left) take = tok_left;
        /* positions before plp_next (recomputed after a preemption) need
         * no row; the others one each, within the step's plp rows */
        int64_t plp_lo = r->plp_next > r->n_done ? r->plp_next : r->n_done;
        bool plp_rows = r->plp && plp_lo < r->n_prompt - 1;
        if (plp_rows && take > plp_lo - r->n_done + plp_left) take = plp_lo - r->n_done + plp_left;
        if (take <= 0) continue;
        int64_t need = kv_seq_blocks_needed(e->kv, r->slot, r->n_done + take);
        if (!make_room(e, r, need, reserved)) {
            int64_t avail = (int64_t)kv_free_blocks(e->kv) - reserved;
            int64_t room = ((int64_t)e->kv->seqs[r->slot].n_blocks + avail) * bt - r->n_done;
            if (take > room) take = room;
            if (take <= 0) continue;
            need = kv_seq_blocks_needed(e->kv, r->slot, r->n_done + take);
        }
        reserved += need;
        tok_left -= take;
        r->step_n = take;
        if (plp_rows) {
            int64_t hi = r->n_done + take < r->n_prompt - 1 ? r->n_done + take : r->n_prompt - 1;
            if (hi > plp_lo) plp_left -= hi - plp_lo;
        }
    }
    /* drafts, oldest first, from what is left of the budget and the pool;
     * the gate weighs them against the step's tokens and what it sends */
    e->plan_n0 = 0;
    e->plan_out = 0;
    for (int i = 0; i < n; i++) {
        const engine_req *r = ord[i];
        if (r->slot < 0 || r->step_n == 0) continue;
        e->plan_n0 += r->step_n;
        e->plan_out += r->state == REQ_DECODE ||
                       (!r->is_embed && r->max_tokens != 0 && r->n_done + r->step_n == r->n_fill);
    }
    if (e->dctx != NULL) {
        draft_model_propose(e, ord, n, tok_left, reserved);
        return;
    }
    for (int i = 0; i < n && e->draft_ngram && tok_left > 0; i++) {
        engine_req *r = ord[i];
        if (r->slot < 0 || r->state != REQ_DECODE || r->step_n != 1 || !r->spec) continue;
        int64_t len = r->n_prompt + r->n_gen; /* positions after this step without drafts */
        int64_t cap = spec_cap(e, r, tok_left);
        if (cap < e->draft_min || spec_throttle_skip(&r->thr)) continue;
        cap = spec_throttle_cap(&r->thr, cap, e->draft_min);
        cap = spec_gate(e, r, cap, 0.0);
        if (cap < e->draft_min) continue;
        const int32_t *row = e->hist + (size_t)r->slot * (size_t)e->n_ctx;
        int n_draft = spec_ngram_draft(row, len, r->draft, (int)cap, e->draft_min, e->draft_p_min);
        int64_t extra = 0;
        n_draft = spec_fit_blocks(e->kv, r->slot, len, n_draft,
                                  (int64_t)kv_free_blocks(e->kv) - reserved, &extra);
        if (n_draft < e->draft_min) continue;
        reserved += extra;
        tok_left -= n_draft;
        e->plan_n0 += n_draft;
        r->step_draft = n_draft;
    }
}

/* ---- sampling ---- */

static bool is_stop_token(const engine_req *r, int32_t tok)
{
    const proto_gen *g = &r->msg.u.gen;
    for (size_t i = 0; i < g->n_stop_tokens; i++) {
        if (g->stop_tokens[i] == tok) return true;
    }
    return false;
}

static float finite_or_floor(double x)
{
    return x >= -FLT_MAX ? (float)x : -FLT_MAX;
}

/* log-softmax of the raw logits: the chosen token's, and the top n. */
static void compute_logprobs(const engine *e, const float *logits, int32_t tok, int32_t n_top,
                             proto_logprob *lp, proto_top *top)
{
    float max = logits[0];
    for (int64_t i = 1; i < e->n_vocab; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0.0;
    for (int64_t i = 0; i < e->n_vocab; i++) sum += exp((double)logits[i] - (double)max);
    double log_z = (double)max + log(sum);
    lp->token = tok;
    lp->logprob = finite_or_floor((double)logits[tok] - log_z);
    lp->rank = 0;
    lp->top = top;
    lp->n_top = 0;
    /* top n by insertion (n <= PROTO_MAX_LOGPROBS); ties keep the lower id first */
    size_t k = 0;
    for (int64_t i = 0; i < e->n_vocab && n_top > 0; i++) {
        float v = logits[i];
        if (k == (size_t)n_top && !(v > top[k - 1].logprob)) continue;
        size_t j = k < (size_t)n_top ? k++ : k - 1;
        while (j > 0 && v > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = (int32_t)i;
        top[j].logprob = v;
    }
    for (size_t i = 0; i < k; i++) top[i].logprob = finite_or_floor(top[i].logprob - log_z);
    lp->n_top = k;
}

/* A gen's logits came out: sample, then send the token or end. False
 * when it ended (r is freed). draft: the token drafted for this position
 * (counted as accepted when the sample equals it), -1 none. */
static bool on_logits(engine *e, engine_req *r, const float *logits, int32_t draft,
                      proto_buf *out)
{
    const proto_gen *g = &r->msg.u.gen;
    const float *to_sample = logits;
    if (r->gstate != NULL) {
        /* The grammar's mask: every token that cannot continue the output is
         * -inf (so logit bias and penalties leave it out too); the end of
         * generation only where the output is complete. Logprobs stay the
         * raw logits'. */
        int64_t n_ok = grammar_state_mask(r->gstate, e->gvocab, e->gmask);
        bool can_end = grammar_state_can_end(r->gstate);
        if (n_ok < 0) {
            finish_err(e, r, PROTO_ERR_INTERNAL, "grammar: out of memory", out);
            return false;
        }
        if (n_ok == 0) {
            if (can_end) { /* complete, and nothing may follow: the end */
                finish(e, r, PROTO_FINISH_STOP, out);
            } else {
                finish_err(e, r, PROTO_ERR_GRAMMAR_DEAD_END,
                           "grammar: no token can continue the output, and it is not complete",
                           out);
            }
            return false;
        }
        for (int64_t t = 0; t < e->n_vocab; t++) {
            bool ok = ((e->gmask[t >> 5] >> (t & 31)) & 1u) != 0 ||
                      (can_end && !g->ignore_eos && e->is_eog[t]);
            e->glogits[t] = ok ? logits[t] : -INFINITY;
        }
        to_sample = e->glogits;
    }
    if (g->n_allowed_tokens > 0) {
        /* allowed_tokens: nothing else */
        for (int64_t t = 0; t < e->n_vocab; t++) e->ban_logits[t] = -INFINITY;
        for (size_t i = 0; i < g->n_allowed_tokens; i++) {
            int32_t t = g->allowed_tokens[i];
            if (t >= 0 && t < e->n_vocab) e->ban_logits[t] = to_sample[t];
        }
        to_sample = e->ban_logits;
    }
    if (g->n_bad > 0) {
        /* bad_words: the token that would complete one */
        const int32_t *out_toks = e->hist + (size_t)r->slot * (size_t)e->n_ctx + (size_t)r->n_prompt;
        for (size_t i = 0, at = 0; i < g->n_bad; at += (size_t)g->bad_len[i++]) {
            int32_t len = g->bad_len[i];
            const int32_t *w = g->bad_ids + at;
            if (r->n_gen < len - 1) continue;
            if (memcmp(out_toks + r->n_gen - (len - 1), w, (size_t)(len - 1) * sizeof(int32_t)) != 0) continue;
            if (to_sample != e->ban_logits) {
                memcpy(e->ban_logits, to_sample, (size_t)e->n_vocab * sizeof(float));
                to_sample = e->ban_logits;
            }
            e->ban_logits[w[len - 1]] = -INFINITY;
        }
    }
    if (r->n_gen < g->min_tokens) {
        /* min_tokens: no end-of-generation or stop token yet */
        if (to_sample != e->ban_logits) memcpy(e->ban_logits, to_sample, (size_t)e->n_vocab * sizeof(float));
        for (int64_t t = 0; t < e->n_vocab; t++) {
            if (e->is_eog[t]) e->ban_logits[t] = -INFINITY;
        }
        for (size_t i = 0; i < g->n_stop_tokens; i++) {
            if (g->stop_tokens[i] >= 0 && g->stop_tokens[i] < e->n_vocab) e->ban_logits[g->stop_tokens[i]] = -INFINITY;
        }
        for (size_t i = 0; i < g->n_min_bans; i++) {
            if (g->min_bans[i] >= 0 && g->min_bans[i] < e->n_vocab) e->ban_logits[g->min_bans[i]] = -INFINITY;
        }
        to_sample = e->ban_logits;
    }
    if (to_sample == e->ban_logits) {
        /* the request's own bans may leave nothing: say so rather than
         * send a banned token */
        bool any = false;
        for (int64_t t = 0; t < e->n_vocab && !any; t++) any = e->ban_logits[t] > -INFINITY;
        if (!any) {
            finish_err(e, r, PROTO_ERR_BAD_REQUEST,
                       "no token may come next: allowed_tokens, bad_words and min_tokens (with the "
                       "grammar, if any) ban every one",
                       out);
            return false;
        }
    }
    int32_t tok = sampler_sample(r->smp, to_sample);
    if (r->gstate != NULL && !(to_sample[tok] > -INFINITY)) {
        /* the sampler must never choose a masked token; never send one */
        finish_err(e, r, PROTO_ERR_INTERNAL, "grammar: the sampler chose a masked token", out);
        return false;
    }
    sampler_accept(r->smp, tok);
    if (tok == draft) r->n_draft_accepted++;
    if ((!g->ignore_eos && e->is_eog[tok]) || is_stop_token(r, tok)) {
        finish(e, r, PROTO_FINISH_STOP, out);
        return false;
    }
    if (r->gstate != NULL) {
        const engine_tok_bytes *tb = &e->tok_bytes;
        size_t o = tb->off[tok], n = tb->off[tok + 1] - o;
        if (!grammar_state_accept_bytes(r->gstate, tb->bytes + o, n)) {
            finish_err(e, r, PROTO_ERR_INTERNAL, "grammar: the chosen token does not continue it", out);
            return false;
        }
    }
    proto_logprob lp;
    proto_top top[PROTO_MAX_LOGPROBS];
    proto_msg m = {.op = PROTO_OP_TOK, .has_id = true, .id = r->id};
    m.u.tok.tokens = &tok;
    m.u.tok.n_tokens = 1;
    if (r->logprobs >= 0) {
        compute_logprobs(e, logits, tok, r->logprobs, &lp, top);
        m.u.tok.logprobs = &lp;
    }
    emit(out, &m);
    /* its position is n_prompt + n_gen < n_ctx (the request ends at n_ctx) */
    e->hist[(size_t)r->slot * (size_t)e->n_ctx + (size_t)(r->n_prompt + r->n_gen)] = tok;
    r->n_gen++;
    if ((r->max_tokens >= 0 && r->n_gen >= r->max_tokens) || r->n_prompt + r->n_gen >= e->n_limit) {
        finish(e, r, PROTO_FINISH_LENGTH, out);
        return false;
    }
    r->next_tok = tok;
    r->state = REQ_DECODE;
    return true;
}

/* The KV positions of r's rejected drafts are cut, then its new full
 * blocks published (engine.h "Speculative decoding"). Nothing while no
 * drafts are being verified. */
static void spec_settle(engine *e, engine_req *r)
{
    if (r->spec_keep < 0) return;
    kv_seq_truncate(e->kv, r->slot, r->spec_keep);
    if (r->use_cache) kv_prefix_publish(e->kv, r->slot, e->hist + (size_t)r->slot * (size_t)e->n_ctx);
    r->spec_keep = -1;
}

/* A decoding r with drafts: row j of its logits follows draft j - 1 (row 0
 * its pending token). Rows are sampled in order while the sampled token
 * equals the draft; each sampled token is sent as without drafts. */
static void spec_verify(engine *e, engine_req *r, proto_buf *out)
{
    const int64_t pos0 = r->n_prompt + r->n_gen - 1; /* the pending token's */
    const int n_draft = r->step_draft;
    const float *rows = e->logits + r->step_logit_row * e->n_vocab;
    r->n_drafted += n_draft;
    int accepted = 0;
    for (int j = 0; j <= n_draft; j++) {
        /* positions [0, pos0 + 1 + j) hold accepted tokens: the prompt,
         * what was sent, and drafts 0 .. j-1 that matched */
        r->spec_keep = pos0 + 1 + j;
        int32_t draft = j < n_draft ? r->draft[j] : -1;
        if (!on_logits(e, r, rows + (int64_t)j * e->n_vocab, draft, out)) return; /* freed */
        if (j == n_draft || r->next_tok != draft) break;
        accepted++;
    }
    spec_throttle_round(&r->thr, accepted > 0);
    spec_accept_round(&e->cost, &r->acc_est, n_draft, accepted);
    if (e->dkv != NULL) {
        /* the draft sequence was fed the first d_fed drafts after pos0 + 1:
         * it keeps the accepted ones, and gets the rest (the correction or
         * bonus token on) when it next drafts */
        r->d_len = pos0 + 1 + (accepted < r->d_fed ? accepted : r->d_fed);
        kv_seq_truncate(e->dkv, r->slot, r->d_len);
        r->d_fed = 0;
    }
    spec_settle(e, r);
}

/* An embed's prompt is all in: pool, normalise, send. */
/* The `plp` line of this step's prompt positions of r: prompt tokens
 * plp_next + 1 onwards, each with its logprob, rank and top alternatives
 * from the logits of the position before it. */
static void emit_plp(engine *e, engine_req *r, proto_buf *out)
{
    int64_t n = r->step_plp_n;
    for (int64_t i = 0; i < n; i++) {
        const float *row = e->logits + (size_t)(r->step_plp_row + i) * (size_t)e->n_vocab;
        int32_t tok = r->prompt[r->plp_next + i + 1];
        proto_logprob *lp = &e->plp_lp[i];
        compute_logprobs(e, row, tok, r->plp_top, lp, e->plp_tops + (size_t)i * PROTO_MAX_LOGPROBS);
        int64_t above = 0;
        for (int64_t v = 0; v < e->n_vocab; v++) above += row[v] > row[tok];
        lp->rank = (int32_t)(above + 1);
    }
    proto_msg m = {.op = PROTO_OP_PLP, .has_id = true, .id = r->id};
    m.u.plp = (proto_plp){.from = r->plp_next + 1, .logprobs = e->plp_lp, .n = (size_t)n};
    emit(out, &m);
    r->plp_next += n;
}

static void finish_embed(engine *e, engine_req *r, proto_buf *out)
{
    float *vec = e->vec;
    double norm = 0.0;
    double n = r->pooling == PROTO_POOLING_MEAN ? (double)r->n_pooled : 1.0;
    for (int64_t i = 0; i < e->n_embd; i++) {
        double v = r->embd_sum[i] / (n > 0 ? n : 1.0);
        r->embd_sum[i] = v;
        norm += v * v;
    }
    norm = sqrt(norm);
    for (int64_t i = 0; i < e->n_embd; i++) {
        vec[i] = (float)(norm > 0 ? r->embd_sum[i] / norm : 0.0);
    }
    proto_msg m = {.op = PROTO_OP_EMB, .has_id = true, .id = r->id,
                   .u.emb = {.vector = vec, .n = (size_t)e->n_embd}};
    emit(out, &m);
    finish(e, r, PROTO_FINISH_STOP, out);
}

/* ---- the step ---- */

static void end_cancelled(engine *e, proto_buf *out)
{
    engine_req **link = &e->queue_head;
    engine_req *prev = NULL;
    while (*link != NULL) {
        engine_req *r = *link;
        if (!r->cancelled) {
            prev = r;
            link = &r->next;
            continue;
        }
        *link = r->next;
        if (e->queue_tail == r) e->queue_tail = prev;
        e->n_queued--;
        r->next = NULL;
        finish(e, r, PROTO_FINISH_CANCELLED, out);
    }
    for (int s = 0; s < e->n_slots; s++) {
        if (e->slots[s] != NULL && e->slots[s]->cancelled) {
            finish(e, e->slots[s], PROTO_FINISH_CANCELLED, out);
        }
    }
}

/* Admits queued requests into free slots, in order, while the pool can
 * give the head its first chunk's blocks beyond what the running requests
 * take this step (else the queue waits: no later request passes the head).
 * With nothing running the head is admitted whatever the estimate: it fits
 * alone (check_request). */
static void admit_queued(engine *e, proto_buf *out)
{
    for (int s = 0; s < e->n_slots && e->queue_head != NULL; s++) {
        if (e->slots[s] != NULL) continue;
        engine_req *r = e->queue_head;
        if (r->resume_oom) {
            e->queue_head = r->next;
            if (e->queue_head == NULL) e->queue_tail = NULL;
            e->n_queued--;
            r->next = NULL;
            finish_err(e, r, PROTO_ERR_INTERNAL, "out of memory to resume a preempted request",
                       out);
            s--;
            continue;
        }
        if (engine_n_running(e) > 0 &&
            first_chunk_blocks(e, r) > (int64_t)kv_free_blocks(e->kv) - running_blocks(e)) {
            break;
        }
        e->queue_head = r->next;
        if (e->queue_head == NULL) e->queue_tail = NULL;
        e->n_queued--;
        r->next = NULL;
        strata_err err;
        if (admit(e, r, s, &err) != 0) {
            LOG_ERROR("engine: id %" PRId64 ": %s", r->id, err.msg);
            finish_err(e, r, PROTO_ERR_INTERNAL, err.msg, out);
            s--; /* the slot is still free */
        }
    }
}

/* Appends tokens [from, from + n) of r's prompt (or its pending token) to
 * the batch at *n_b. */
static void batch_add(engine *e, engine_req *r, const int32_t *toks, int64_t pos0, int64_t n,
                      int64_t *n_b)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t k = *n_b + i;
        e->b_tok[k] = toks[i];
        e->b_seq[k] = r->slot;
        e->b_pos[k] = (int32_t)(pos0 + i);
        e->b_want[k] = 0;
        e->b_want_embd[k] = 0;
    }
    *n_b += n;
}

/* The batch of the step that starts is built: its size for `pong`, and the
 * test hook's hang (engine_params.hang_at_step), which blocks here for good,
 * holding no lock, so that the reader keeps answering pings. */
static void progress_batch_built(engine *e, int64_t n_b)
{
    pthread_mutex_lock(&e->progress_lock);
    e->pg_tokens = n_b;
    pthread_mutex_unlock(&e->progress_lock);
    if (e->hang_at_step > 0 && e->pg_steps + 1 == e->hang_at_step) {
        LOG_WARN("engine: STRATA_TEST_HANG_AT_STEP=%" PRId64 ": the scheduler hangs in step %" PRId64
                 " (%" PRId64 " tokens) for good; a test hook, never for production",
                 e->hang_at_step, e->hang_at_step, n_b);
        for (;;) sleep(1);
    }
}

/* Steps 2-5 of engine.h's scheduling (1 is done by the caller); returns the
 * batch's tokens (0: nothing ran). */
static int64_t run_step(engine *e, proto_buf *out)
{
    admit_queued(e, out);
    /* before planning: the draft model's passes run there */
    const double t_start = strata_clock_ms();
    plan_step(e);

    /* the batch: decoding sequences first, one token each */
    int64_t n_b = 0, n_logits = 0, n_embd_rows = 0;
    int n_reqs = 0;
    for (int s = 0; s < e->n_slots; s++) {
        engine_req *r = e->slots[s];
        if (r == NULL || r->state != REQ_DECODE || r->step_n == 0) continue;
        r->step_logit_row = n_logits;
        r->step_n_embd = 0;
        int64_t first = n_b;
        batch_add(e, r, &r->next_tok, r->n_prompt + r->n_gen - 1, 1, &n_b);
        batch_add(e, r, r->draft, r->n_prompt + r->n_gen, r->step_draft, &n_b);
        for (int64_t k = first; k < n_b; k++) e->b_want[k] = 1;
        n_logits += n_b - first;
        e->b_reqs[n_reqs++] = r;
    }
    /* then prompt chunks, oldest admission first, up to the budget */
    engine_req **pre = e->b_prefill;
    int n_pre = 0;
    for (int s = 0; s < e->n_slots; s++) {
        engine_req *r = e->slots[s];
        if (r == NULL || r->state != REQ_PREFILL || r->step_n == 0) continue;
        int i = n_pre++;
        while (i > 0 && pre[i - 1]->order > r->order) {
            pre[i] = pre[i - 1];
            i--;
        }
        pre[i] = r;
    }
    for (int i = 0; i < n_pre; i++) {
        engine_req *r = pre[i];
        int64_t take = r->step_n; /* plan_step kept the sum within the budget */
        int64_t first = n_b;
        const int32_t *row = e->hist + (size_t)r->slot * (size_t)e->n_ctx;
        batch_add(e, r, row + r->n_done, r->n_done, take, &n_b);
        r->step_logit_row = -1;
        r->step_plp_n = 0;
        bool last_chunk = r->n_done + take == r->n_fill;
        if (r->plp) {
            /* positions plp_next .. n_prompt - 2: the logits that give the
             * prompt's next token its logprob (in position order, before
             * the last position's row below) */
            r->step_plp_row = n_logits;
            for (int64_t k = 0; k < take; k++) {
                int64_t p = r->n_done + k;
                if (p < r->plp_next || p >= r->n_prompt - 1) continue;
                e->b_want[first + k] = 1;
                r->step_plp_n++;
            }
            n_logits += r->step_plp_n;
        }
        if (r->is_embed) {
            r->step_embd_row = n_embd_rows;
            r->step_n_embd = 0;
            for (int64_t k = 0; k < take; k++) {
                int64_t p = r->n_done + k;
                bool want = r->pooling == PROTO_POOLING_MEAN ||
                            (r->pooling == PROTO_POOLING_CLS && p == 0) ||
                            (r->pooling == PROTO_POOLING_LAST && p == r->n_prompt - 1);
                e->b_want_embd[first + k] = want;
                r->step_n_embd += want;
            }
            n_embd_rows += r->step_n_embd;
        } else if (last_chunk && r->max_tokens != 0) {
            e->b_want[n_b - 1] = 1;
            r->step_logit_row = n_logits++;
        }
        if (r->t_prompt_start < 0) r->t_prompt_start = t_start;
        e->b_reqs[n_reqs++] = r;
    }
    progress_batch_built(e, n_b);
    if (n_b == 0) return 0;
    const double t_built = strata_clock_ms(); /* the gate times the rest (spec.h) */

    model_batch b = {.n_tokens = n_b, .tokens = e->b_tok, .seq_ids = e->b_seq, .pos = e->b_pos,
                     .want_logits = e->b_want};
    strata_err err;
    int rc = model_forward_ex(e->ctx, &b, e->logits, n_embd_rows > 0 ? e->b_want_embd : NULL,
                              e->embd, &err);
    if (rc != 0) {
        LOG_ERROR("engine: forward pass of %" PRId64 " tokens failed: %s", n_b, err.msg);
        for (int i = 0; i < n_reqs; i++) finish_err(e, e->b_reqs[i], PROTO_ERR_INTERNAL, err.msg, out);
        return n_b;
    }
    const double t_end = strata_clock_ms();

    /* the blocks this step filled, for later requests (and ones that
     * arrive while these still run) */
    for (int i = 0; i < n_reqs; i++) {
        engine_req *r = e->b_reqs[i];
        /* with drafts, once the rejected ones are cut (spec_settle) */
        if (r->use_cache && r->step_draft == 0) {
            kv_prefix_publish(e->kv, r->slot, e->hist + (size_t)r->slot * (size_t)e->n_ctx);
        }
    }

    /* hidden states into their requests' sums, in batch order */
    for (int i = 0; i < n_reqs; i++) {
        engine_req *r = e->b_reqs[i];
        if (!r->is_embed) continue;
        for (int64_t k = 0; k < r->step_n_embd; k++) {
            const float *h = e->embd + (r->step_embd_row + k) * e->n_embd;
            for (int64_t d = 0; d < e->n_embd; d++) r->embd_sum[d] += h[d];
        }
        r->n_pooled += r->step_n_embd;
    }
    for (int i = 0; i < n_reqs; i++) {
        engine_req *r = e->b_reqs[i];
        if (r->state == REQ_DECODE) {
            if (r->step_draft > 0) spec_verify(e, r, out);
            else on_logits(e, r, e->logits + r->step_logit_row * e->n_vocab, -1, out);
            continue;
        }
        if (r->step_plp_n > 0) emit_plp(e, r, out);
        r->n_done += r->step_n;
        if (!r->is_embed && r->msg.u.gen.progress && r->n_gen == 0) {
            /* llama-server's return_progress: how far the prompt is */
            int64_t done = r->n_done < r->n_prompt ? r->n_done : r->n_prompt;
            proto_msg m = {.op = PROTO_OP_PROG, .has_id = true, .id = r->id};
            m.u.prog = (proto_prog){.processed = done, .total = r->n_prompt,
                                    .cached = r->n_cached < r->n_prompt ? r->n_cached : r->n_prompt,
                                    .ms = t_end - r->t_prompt_start};
            emit(out, &m);
        }
        if (r->n_done < r->n_fill) continue;
        if (r->t_prompt_end < 0) r->t_prompt_end = t_end;
        if (r->is_embed) finish_embed(e, r, out);
        else if (r->max_tokens == 0) finish(e, r, PROTO_FINISH_LENGTH, out);
        else on_logits(e, r, e->logits + r->step_logit_row * e->n_vocab, -1, out);
    }
    /* decoding steps only: a prompt chunk's step costs more than a decoding
     * step of as many tokens (new KV blocks, its first touches) */
    double step_ms = e->test_step_ms ? e->test_step_ms(n_b, false) : strata_clock_ms() - t_built;
    spec_cost_step(&e->cost, n_pre == 0 ? n_b : 0, step_ms);
    return n_b;
}

void engine_step(engine *e, proto_buf *out)
{
    if (!engine_busy(e)) return;
    double t0 = strata_clock_ms();
    pthread_mutex_lock(&e->progress_lock);
    e->pg_running = true;
    e->pg_start_ms = t0;
    e->pg_tokens = 0;
    pthread_mutex_unlock(&e->progress_lock);

    end_cancelled(e, out);
    int64_t n_b = run_step(e, out);

    kv_pool_trim(e->kv, strata_clock_ms());
    if (e->dkv != NULL) kv_pool_trim(e->dkv, strata_clock_ms());
    int64_t committed = committed_bytes(e);
    double ms = strata_clock_ms() - t0;
    int64_t kv_used = (int64_t)e->kv->n_blocks - kv_free_blocks(e->kv);
    kv_prefix_stats ps;
    kv_prefix_get_stats(e->kv, &ps);
    pthread_mutex_lock(&e->progress_lock);
    e->pg_kv_cached = ps.blocks_cached;
    e->pg_lookup_tokens = ps.lookup_tokens;
    e->pg_hit_tokens = ps.hit_tokens;
    e->pg_running = false;
    e->pg_tokens = 0;
    e->pg_steps++;
    if (n_b > 0) {
        e->pg_cost[e->pg_i_cost] = (ms > 0 ? ms : 0.0) / (double)n_b;
        e->pg_i_cost = (e->pg_i_cost + 1) % PROTO_PONG_COST_STEPS;
        if (e->pg_n_cost < PROTO_PONG_COST_STEPS) e->pg_n_cost++;
    }
    e->pg_kv_used = kv_used;
    e->pg_preemptions = e->n_preemptions;
    e->pg_committed_bytes = committed;
    pthread_mutex_unlock(&e->progress_lock);
}
