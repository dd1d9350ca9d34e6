/* The engine's scheduler: many requests over one model, continuous batching
 * with chunked prefill, per request sampling and statistics.
 *
 * Requests come in as decoded protocol messages (protocol.h) and leave as
 * encoded lines appended to a caller's buffer; this module never touches a
 * file descriptor (engine_loop.h does the I/O).
 *
 * Scheduling. K slots (sequences of the model's KV cache) run at once;
 * requests beyond K wait in a FIFO queue and take the first slot that
 * frees. Each engine_step:
 *   1. ends the requests cancelled since the last step (done "cancelled"),
 *      running or queued;
 *   2. admits queued requests into free slots, in arrival order;
 *   3. builds one batch: one token of every decoding sequence, then prompt
 *      chunks of the prefilling sequences in admission order until the
 *      token budget B (n_batch) is spent; a prompt longer than what is left
 *      continues at the next step (chunked prefill, so a `stop` is seen
 *      between chunks); a gen with prompt_logprobs wants the logits of
 *      each of its prompt positions, and the step's chunks of such gens
 *      hold at most PROTO_PLP_CHUNK of those positions together (the
 *      engine's logits buffer grows by that many rows at the first one);
 *   4. runs one model_forward_ex over it;
 *   5. writes the prompt logprobs of those chunks (`plp`), then samples a
 *      token for every sequence whose logits came out (decoding
 *      ones, and those whose prompt just ended), appending `tok`, and ends
 *      the ones that are finished (`done`), or pools an embedding's hidden
 *      states (`emb`, then `done`).
 * Because the forward pass is batch-invariant and each request has its own
 * sampler and RNG, a request's tokens do not depend on what else runs.
 *
 * Admission checks (at arrival, so a bad request never waits in the queue):
 * token ids in the vocabulary (prompt, stop_tokens, logit_bias), an id not
 * already in flight, and prompt + max_tokens <= n_ctx (err
 * "context_length", naming both numbers), and prompt + max_tokens <= the
 * whole KV pool (the same code; the message names the pool).
 *
 * KV pool. One pool of blocks shared by all slots, sized on its own:
 * kv_max_tokens, else kv_max_bytes, else every slot's whole context but at
 * most ENGINE_DEFAULT_KV_MIB (at least one context), so `--slots 16 --ctx
 * 32768` runs in a pool much smaller than 16 x 32768 positions as long as
 * what is in flight fits. A request holds no more than min(n_ctx, pool)
 * positions: one without max_tokens ends with "length" there.
 *   Memory (kv_cache.h "Memory"): elastic by default: committed as blocks
 *   are written, in steps of kv_step_tokens, the first kv_init_tokens kept,
 *   the others given back kv_hold_ms after their blocks all went free
 *   (checked after every step, and by the loop while idle), so the RSS
 *   follows the KV in use; or resident (kv_resident_tokens), all allocated
 *   at start. ready.kv says which, with the figures.
 *   Admission: the queue's head enters a free slot only while the pool can
 *   give its first chunk (after what the prefix cache gives it) beyond the
 *   blocks the running requests take this step; later requests never pass
 *   it. With nothing running the head always enters (it fits alone).
 *   Preemption: each step hands out blocks oldest request first (by first
 *   admission). One that needs a block when none is free (idle cached
 *   blocks count as free) preempts the most recently started request
 *   younger than itself, and the next youngest, until it has room; when
 *   no younger one is left it feeds nothing this step (a prefilling one
 *   takes the part of its chunk that fits) and waits for older ones. So the
 *   oldest always progresses, and every request ends. A preempted request
 *   gives its blocks back (its full blocks were published to the prefix
 *   cache at every step, so they stay cached, idle), keeps its sampler (RNG
 *   and penalty history) and tokens, and goes back to the head of the
 *   queue; resumed, it prefills its prompt and generated tokens again,
 *   mostly from the prefix cache, the last generated (already sent) token
 *   last, and samples from those logits exactly where it left off: batch
 *   invariance makes the recomputed logits bit-identical, so a seeded
 *   request's tokens are those of its run alone, and nothing already sent
 *   is sent again. done's stats.preempted counts its preemptions (its
 *   prompt_n and cached_n are those of its first admission); pong's
 *   kv.preemptions the engine's.
 *
 * Generation rules. A sampled token that is a stop token, or one of the
 * model's end-of-generation tokens (unless ignore_eos), ends the request
 * with "stop" and is not sent. Otherwise it is sent in `tok`; the request
 * ends with "length" once it has max_tokens tokens, or once prompt +
 * generated tokens reach n_ctx. The sampler's penalties see the generated
 * tokens only (as `strata run`). stats.predicted_n counts the tokens sent.
 *
 * Prefix cache (model/kv_prefix.h), on unless no_prefix_cache. A request
 * admitted into a slot starts its sequence from the longest chain of
 * cached full blocks of its prompt, by reference, and computes only the
 * rest; when the whole prompt is cached its last token is still computed
 * (for the logits), into a copy of the last block. After each step every
 * request of the batch publishes the blocks it filled (prompt and
 * generated tokens alike), so a request can reuse the prompt of one still
 * running; a request that ends leaves them cached, idle, until the pool
 * needs the room (least recently used first) or the budget is exceeded.
 * Opt-outs: a gen/embed with `cache` false neither reuses nor publishes;
 * an embed with mean or cls pooling needs every (or the first) prompt
 * token's hidden state, which is not cached, so it does not reuse (but
 * publishes); likewise a gen with prompt_logprobs, which needs every
 * prompt position's logits (resumed after a preemption, it reuses at most
 * the positions whose logprobs it has sent). A reuse shorter than prefix_min_tokens is none. done's
 * cached_n is the prompt tokens reused (prompt_n counts them too). The
 * output does not change: keys and values are read back from the cache
 * the same way whoever wrote them (batch invariance), the sampler's
 * penalties look at generated tokens only, and nothing else depends on
 * where a prompt's KV came from.
 *
 * Speculative decoding (draft_ngram or draft_model). In step 3 each
 * decoding sequence of a gen that did not opt out (`speculative` false)
 * may add draft tokens after its pending token: up to draft_max from the
 * n-gram source (spec.h) or the draft model (below), never more than it
 * may still generate, and only
 * from what the step leaves over (token budget and free KV blocks after
 * every request's normal share: drafts never delay a prefill or preempt
 * anything). Logits are asked for the pending token and every draft. In
 * step 5 the rows are sampled in order, exactly as decoding one token per
 * step would (same logits, bit for bit, by batch invariance; the same
 * sampler, RNG draws, penalty history, grammar mask and logprobs): row j's
 * token is sent; while it equals draft j, row j+1 continues; the first mismatch
 * (or the end of the request) stops, and the KV positions of the drafts
 * not accepted are cut off (kv_seq_truncate) before any block of the
 * sequence is published to the prefix cache, so a rejected token's rows
 * are never cached. A step thus sends 1 to 1 + drafts tokens per sequence.
 * Sampled requests: sampling the target's row and accepting the draft only
 * when the sample equals it is the rejection-sampling rule for a point-mass
 * draft (accept x with probability p(x), else draw from p without x,
 * renormalised), so the output is distributed as the target's, and with a
 * seed it is the very output of the same request without speculation.
 * done's draft_n / draft_accepted_n count the drafted tokens and those
 * that matched.
 *   Draft model (draft_model). The engine runs a second model context for
 * it, on the target's thread pool, with a KV cache of its own: one
 * sequence per slot, sized for every slot's whole sequence plus drafts
 * (slots x (min(n_ctx, pool) + draft_max) positions, rounded up to blocks,
 * elastic like the target's pool, so only what is written is committed;
 * no prefix cache). At start the vocabularies must agree: the same logits
 * size (n_vocab) and, token by token, the same texts in
 * tokenizer.ggml.tokens (or neither has a list); else engine_init fails
 * naming the first difference. Each speculating gen mirrors its tokens
 * into its draft sequence: the prompt chunk by chunk in the steps that
 * prefill the target (all of it: the draft has no prefix cache), then,
 * in a step where it drafts, whatever the draft sequence lacks (the
 * last verification's correction or bonus token, or more after steps
 * without drafts), with at most n_batch draft tokens fed per step in all.
 * Proposals are greedy: the draft's argmax at each position, kept while
 * its softmax probability is at least draft_p_min, up to the sequence's
 * cap (as for n-gram drafts), stopping after an end-of-generation token;
 * fewer than draft_min propose none. The passes are batched: one draft
 * forward carries the catch-up of every drafting sequence (and the prompt
 * chunks), then one forward per further draft token carries every
 * sequence still drafting. After verification the draft sequence keeps
 * the accepted drafts it was fed and is cut after them
 * (kv_seq_truncate); preemption, cancellation and the end of a request
 * free it. Exactness is that of any deterministic draft: the target
 * samples every position itself.
 *   Throttle (both sources, spec.h "Throttle"). After SPEC_THROTTLE_FAILS
 * rounds in a row with no draft accepted (a draft model's round that
 * proposed nothing counts: its draft forwards cost time), a sequence
 * drafts nothing for a pause of steps that starts at SPEC_THROTTLE_MIN
 * and doubles with each further failed round up to SPEC_THROTTLE_MAX,
 * and each failed round halves the next round's drafts (down to one, or
 * draft_min); an accepted draft ends the cycle. The state is the sequence's own
 * and changes only how many tokens a step may send, never which.
 *   Cost gate (draft_gate, spec.h "Cost gate"). The engine times its
 * decoding steps by token count and the draft model's forwards, keeps
 * each sequence's acceptance estimate, and lets a sequence draft only the
 * number of tokens (none, or draft_min up to its cap after the throttle)
 * that maximises the step's expected tokens per millisecond. Where the
 * times are not known yet (or have gone stale) the cap goes through,
 * which measures them. Like the throttle it changes how many tokens a
 * step sends, never which; unlike it, it depends on the machine's timing,
 * so the drafts a request gets are not reproducible run to run (its
 * tokens are).
 *
 * Progress. Each step publishes what `pong` reports (protocol.h): steps
 * completed, whether one runs, since when and over how many tokens, the
 * slowest ms per token of the last PROTO_PONG_COST_STEPS steps, and the KV
 * figures: blocks in use, cached, prefix-cache lookup and hit tokens. A step counts from the start of engine_step to its end,
 * whatever it did (cancellations only, or a failed forward pass, too).
 *
 * Threads: an engine is used by one thread (the scheduler), with one
 * exception: engine_get_progress may be called from any thread at any time
 * (the reader answers pings with it while a step runs). The figures it
 * reads are behind `progress_lock`, which a step takes only briefly at its
 * start and end, never across the forward pass. */
#ifndef STRATA_ENGINE_ENGINE_H
#define STRATA_ENGINE_ENGINE_H

#include "base/err.h"
#include "engine/protocol.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

#define ENGINE_DEFAULT_SLOTS 4
#define ENGINE_DEFAULT_CTX 4096
#define ENGINE_DEFAULT_BATCH 512
/* The default KV pool's cap (engine_pool_tokens): 2 GiB, what a 16 GiB
 * laptop can spare next to a 7-8B model's weights. */
#define ENGINE_DEFAULT_KV_MIB 2048
/* The elastic pool's defaults: steps of 512 positions (64 MiB for an 8B
 * model's f16 KV), one of them kept, the rest given back after 10 s free. */
#define ENGINE_DEFAULT_KV_STEP 512
#define ENGINE_DEFAULT_KV_HOLD_MS 300000

typedef struct engine_params {
    int n_slots;       /* K, sequences at once; 0: ENGINE_DEFAULT_SLOTS */
    int64_t n_ctx;     /* tokens of one request (prompt + generated); 0: ENGINE_DEFAULT_CTX,
                          or the model's training context when smaller */
    int64_t n_batch;   /* B, tokens of one step; 0: ENGINE_DEFAULT_BATCH; raised to K */
    int n_threads;     /* of the forward pass; 0: 1 */
    uint32_t kv_type;  /* KV cache rows: STRATA_TYPE_F16 or STRATA_TYPE_Q8_0; 0: F16 */
    int64_t kv_max_tokens; /* positions of the KV pool all slots share (rounded up to blocks);
                              0: from kv_max_bytes, else the default ("KV pool") */
    int64_t kv_max_bytes;  /* the pool in bytes (whole blocks, at least one); 0: unset */
    int64_t kv_resident_tokens; /* > 0: the resident profile: a pool of that many positions,
                                   all committed at start, never shrunk (overrides kv_max_*) */
    int64_t kv_init_tokens;     /* elastic: positions never given back; 0: one step */
    int64_t kv_step_tokens;     /* elastic: positions per step; 0: ENGINE_DEFAULT_KV_STEP */
    int64_t kv_hold_ms;         /* elastic: free time before a step goes back; < 0: the
                                   default ENGINE_DEFAULT_KV_HOLD_MS; 0: at once */
    bool no_prefix_cache;       /* true: the prefix cache is off (engine.h "Prefix cache") */
    int64_t prefix_cache_bytes; /* its budget: bytes of KV blocks that may stay cached with no
                                   request holding them; 0: the whole pool */
    int64_t prefix_min_tokens;  /* the fewest prompt tokens a reuse must cover; 0: one block */
    bool draft_ngram;           /* n-gram (prompt lookup) drafts ("Speculative decoding") */
    const model *draft_model;   /* a draft model with the target's vocabulary, borrowed (it
                                   must outlive the engine); NULL: none. Not with draft_ngram */
    int draft_max;              /* drafted tokens per sequence and step at most; 0: 4 */
    int draft_min;              /* fewer proposed tokens are not drafted; 0: 1 */
    float draft_p_min;          /* a draft token's least draft probability (spec.h); 0: 0.5;
                                   < 0: none */
    bool draft_gate;            /* the cost gate (spec.h "Cost gate"): drafts only where the
                                   measured step times say they pay; false: every step drafts
                                   what the source and the throttle allow */
    double (*test_step_ms)(int64_t n_tokens, bool draft); /* TEST ONLY: when set, the
                             cost gate takes a step's (draft false) or a draft
                             forward's (true) time of n_tokens from it instead of
                             the clock; NULL: the clock */
    int64_t hang_at_step; /* TEST ONLY (STRATA_TEST_HANG_AT_STEP, protocol.h): >= 1
                             blocks the scheduler forever at the start of that
                             step; 0: never */
} engine_params;

typedef struct engine engine;

/* The positions of the KV pool that engine_init makes for these
 * parameters (engine.h "KV pool"): a multiple of the block size; 0 when
 * the sizes are invalid (negative or too large). */
int64_t engine_pool_tokens(const model *m, const engine_params *p, int n_slots, int64_t n_ctx);

/* Makes an engine for m (which must outlive it): the model context, the
 * KV pool and every per-step buffer. Errors: STRATA_EINVAL for bad
 * parameters, STRATA_ENOMEM, and those of model_ctx_init. */
int engine_init(engine **out, const model *m, const engine_params *p, strata_err *err);
void engine_free(engine *e);

/* The `ready` message for this engine; its strings are the engine's and
 * stay valid until engine_free. */
void engine_ready(const engine *e, proto_msg *out);

/* Handles one decoded server → engine message, appending any immediate
 * reply (pong, err) to out. gen and embed are queued (their arrays are
 * taken: *m is left empty) or refused with `err`; stop marks the request
 * for the next step; shutdown stops accepting (see engine_accepting).
 * Nothing is freed that the caller still owns: call proto_msg_free(m)
 * afterwards as usual. */
void engine_handle(engine *e, proto_msg *m, proto_buf *out);

/* Answers a line that could not be decoded: an `err` with the given code
 * and message, naming id when has_id and the id is not one of a request in
 * flight (a line cannot end a request it failed to make; the message then
 * names the id instead). */
void engine_handle_bad_line(engine *e, const char *code, bool has_id, int64_t id,
                            const char *message, proto_buf *out);

/* False after `shutdown`: later gen/embed get err "shutting_down". */
bool engine_accepting(const engine *e);
void engine_stop_accepting(engine *e);

/* True while any request is running or queued. */
bool engine_busy(const engine *e);

/* Runs one scheduler step (see above), appending its lines to out. Does
 * nothing when not busy. A failed forward pass ends the requests of that
 * batch with err "internal" and the engine goes on. */
void engine_step(engine *e, proto_buf *out);

/* The scheduler's progress and KV figures as `pong` carries them (every
 * field of *out set, has_progress and has_kv true). Thread-safe: the one
 * call another thread may make while the scheduler runs. */
void engine_get_progress(engine *e, proto_pong *out);

/* Called on the scheduler's thread each time an id gets its terminal
 * message (`done`, or `err` naming it), right after that line is appended
 * to the step's buffer. NULL turns it off. */
typedef void (*engine_end_fn)(void *ctx, int64_t id);
void engine_set_end_hook(engine *e, engine_end_fn fn, void *ctx);

/* Gives back the KV pool's steps whose hold has passed (the step does it
 * too; the loop calls it when idle). */
void engine_trim(engine *e);

/* Milliseconds until engine_trim has something to give back; -1: nothing
 * is due. */
double engine_next_trim_ms(const engine *e);

/* Requests running and queued, for logs. */
int engine_n_running(const engine *e);
int64_t engine_n_queued(const engine *e);

#endif
