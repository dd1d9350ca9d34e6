/* The engine protocol, version 1: the codec shared by the engine (which
 * reads server → engine lines and writes engine → server lines) and the
 * server (the other way round). DESIGN.md "The engine protocol (v1)" is the
 * overview; this header is the reference for every field.
 *
 * This file owns the wire format: the message structs, their encoding to
 * one line of JSON and their decoding with a message that names the
 * problem (and the id when it could be read), and a line reader that takes
 * partial reads and refuses oversized lines without losing sync. It knows
 * nothing about models, slots or pipes' owners.
 *
 * ---- Framing ----
 * Newline-delimited JSON: one object per line, terminated by '\n' (a '\r'
 * before it is ignored; blank lines are skipped). A line holds at most
 * PROTOCOL_MAX_LINE bytes, not counting the '\n'. Writers put `op` first;
 * readers accept the fields in any order, ignore fields they do not know
 * (so later versions can add some) and refuse duplicate keys.
 *
 * ---- Ids ----
 * `id` is a JSON integer in [0, PROTO_ID_MAX] (2^53-1, exact in every JSON
 * implementation), chosen by the server, unique per engine connection: the
 * server never reuses one (DESIGN.md invariant 2). Every `gen` and `embed`
 * id gets exactly one terminal message, `done` or `err`, and the engine
 * never names the id again after it (invariant 1).
 *
 * ---- Server → engine ----
 * {"op":"gen","id":7,"tokens":[1,2,3],"max_tokens":64,"sampling":{...},
 *  "stop_tokens":[2],"logprobs":0,"ignore_eos":false}
 *   id          required.
 *   tokens      required; the prompt as token ids (>= 1 of them, each in
 *               [0, 2^31-1]; the engine checks them against its vocabulary).
 *   max_tokens  optional integer >= -1; the most tokens to generate. -1 or
 *               absent: no limit but the context (then `done` says
 *               `length` when the context is full). 0 evaluates the prompt
 *               and finishes with `length`.
 *   sampling    optional object; every field optional, defaults in
 *               brackets (those of llama.cpp's command line):
 *     temperature       number [0.8]; <= 0 is greedy (argmax, no RNG)
 *     top_k             integer [40]; <= 0 off
 *     top_p             number in [0,1] [0.95]; 1 off
 *     min_p             number in [0,1] [0.05]; 0 off
 *     typical_p         number in [0,1] [1]; 1 off
 *     repeat_penalty    number > 0 [1]; 1 off
 *     presence_penalty  number [0]
 *     frequency_penalty number [0]
 *     penalty_last_n    integer in [0, PROTO_MAX_PENALTY_LAST_N] [64]: how
 *                       many of the sequence's last tokens, the prompt's
 *                       included (as llama.cpp's server and command line),
 *                       the penalties look at
 *     top_n_sigma       number [0]; <= 0 off: logits below max - n x their
 *                       standard deviation are dropped (llama.cpp's)
 *     xtc_probability   number in [0,1] [0]; 0 off: XTC's chance per token
 *     xtc_threshold     number in [0,1] [0.1]; > 0.5 off: XTC then drops the
 *                       tokens of at least this probability but the least
 *                       likely of them
 *     dynatemp_range    number >= 0 [0]; 0 off: the temperature moves in
 *                       [max(0, t - range), t + range] with the entropy
 *     dynatemp_exponent number >= 0 [1]
 *     mirostat          0, 1 or 2 [0]: Mirostat 1.0 / 2.0 (llama.cpp's chain:
 *                       bias, temperature, Mirostat; no penalties, top-k ...)
 *     mirostat_tau      number >= 0 [5]: its target surprise
 *     mirostat_eta      number >= 0 [0.1]: its learning rate
 *     dry_multiplier    number >= 0 [0]; 0 off: DRY (llama.cpp's), with
 *     dry_base          number [1.75], dry_allowed_length integer >= 0 [2],
 *     dry_penalty_last_n integer in [0, PROTO_MAX_PENALTY_LAST_N] [64]
 *                       (tokens of prompt and output it looks at), and
 *     dry_sequence_breakers  array of at most PROTO_MAX_DRY_BREAKERS
 *                       non-empty strings (each cut to
 *                       PROTO_DRY_BREAKER_BYTES bytes) [["\n", ":", "\"", "*"]]
 *     seed              integer in [0, 2^63-1]; absent or null: the engine
 *                       picks one (the output is then not reproducible)
 *     logit_bias        [[token, bias], ...] or {"token": bias, ...}; bias
 *                       is a number added to the logit, or false to ban
 *                       the token (-infinity)
 *   stop_tokens optional array of token ids that end the generation:
 *               `done` says `stop`; the stop token itself is not sent.
 *   allowed_tokens  optional array of token ids (vLLM's allowed_token_ids):
 *               only these may be sampled (end-of-generation tokens
 *               too only when listed).
 *   bad_words   optional array of at most PROTO_MAX_BAD_WORDS arrays of 1 to
 *               PROTO_MAX_BAD_WORD_TOKENS token ids (vLLM's bad_words, as
 *               token sequences): the last token of one is banned where the
 *               tokens before it end the output so far (always, for one of
 *               one token).
 *   min_tokens  optional integer >= 0 [0]: until this many tokens are
 *               generated, the end-of-generation tokens and stop_tokens
 *               are banned (vLLM's min_tokens); a grammar that allows
 *               nothing more still ends the output.
 *   min_bans    optional array of token ids, banned too until min_tokens
 *               (vLLM's stop_token_ids, which the server ends the text
 *               after, keeping them: they are not stop_tokens).
 *   ignore_eos  optional boolean [false]; false: the model's end-of-
 *               generation tokens (eos/eot and the like, from its
 *               tokenizer) stop it too, the same way (not sent).
 *   logprobs    optional; absent, null, false or 0: none. true: each
 *               generated token carries its own log-probability. An
 *               integer N in [1, PROTO_MAX_LOGPROBS]: that plus the N most
 *               likely alternatives.
 *   prompt_logprobs  optional, as logprobs: each prompt token after the
 *               first gets its log-probability given the tokens before it
 *               (and its rank, and the N most likely alternatives), sent in
 *               `plp` lines before the first `tok` (vLLM's prompt_logprobs,
 *               OpenAI's echo with logprobs). Such a request takes no
 *               prefix from the prefix cache (every prompt position's
 *               logits are computed; its blocks are still left there), and
 *               its prompt is prefilled in chunks of at most
 *               PROTO_PLP_CHUNK tokens.
 *   progress    optional boolean [false]: after each step that prefills
 *               part of its prompt, a `prog` line says how far it is (for
 *               llama-server's return_progress).
 *   cache       optional boolean [true]; false: this request neither takes
 *               its prompt's prefix from the engine's prefix cache nor
 *               leaves its blocks there (llama-server's cache_prompt:
 *               false). Its output is the same either way: a request
 *               served partly from the cache gives bit-identical tokens
 *               and logprobs; the opt-out is for measuring and for prompts
 *               that must not stay in memory.
 *   grammar     optional string: a GBNF grammar (llama.cpp's dialect, start
 *               rule `root`) the output must match; the sampler masks every
 *               token that cannot continue it, and the end of generation is
 *               allowed only where it is complete. The server compiles
 *               JSON Schema (`response_format`, `json_schema`) to it. An
 *               invalid grammar is refused with `err` code `bad_grammar`.
 *   speculative optional boolean [true]; false: no speculative decoding
 *               for this request. It matters only when `ready` names a
 *               `draft` source (grammar-constrained requests speculate too:
 *               each verified position is masked as without drafts).
 *               Speculation does not change the output: greedy requests
 *               give exactly the tokens they give without it, and sampled
 *               ones with a seed give the very tokens (and logprobs) of the
 *               same seed without it (each verified row is sampled as plain
 *               decoding samples it; a draft is kept only when the sample
 *               equals it: the rejection-sampling rule for a point-mass
 *               draft, see engine.h "Speculative decoding").
 *   draft_max   optional integer in [0, the engine's draft.max]: at most
 *               this many drafted tokens per step for this request; 0: none
 *               (as speculative false); absent: the engine's.
 *
 * {"op":"embed","id":8,"tokens":[1,2,3],"pooling":"mean"}
 *   id, tokens  as for gen.
 *   pooling     optional: "mean", "cls" (first token), "last"; absent: the
 *               model's pooling type when its GGUF names one, else "mean".
 *   cache       as for gen. Mean and cls pooling need the hidden state of
 *               every (or the first) prompt token, which the cache does not
 *               keep, so they never take a prefix from it (but do leave
 *               their blocks for later requests); last pooling does.
 *   Answered by `emb`, then `done` (finish "stop", predicted_n 0).
 *
 * {"op":"stop","id":7}     cancel; the request ends with `done` finish
 *                          "cancelled" at the next step (also between
 *                          prefill chunks, or while queued). An unknown or
 *                          finished id is ignored: no reply.
 * {"op":"ping","id":9}     answered by `pong` (below) at once, by the
 *                          engine's reader thread, even while a step runs:
 *                          a pong proves that the process reads its input,
 *                          and carries the scheduler's progress so that
 *                          the server can tell a long step from a wedged
 *                          scheduler. Ping ids are the server's own; they
 *                          are not requests and get no `done`.
 * {"op":"shutdown"}        accept nothing new: later gen/embed get `err`
 *                          "shutting_down" (stop and ping still work); the
 *                          requests already accepted, running or queued,
 *                          finish as usual; then the engine exits 0. End of
 *                          file on the engine's stdin means the same.
 *
 * ---- Engine → server ----
 * {"op":"ready","protocol":1,"model":{"arch":"llama","n_ctx_train":2048,
 *  "n_vocab":32000,"n_embd":4096,"n_layer":32},"slots":4,"n_ctx":4096,
 *  "n_batch":512,"kv":{"type":"f16","block_tokens":32,"n_blocks":512,
 *  "bytes":268435456,"prefix_cache":true,"cache_blocks":512,
 *  "cache_bytes":268435456,"cache_min_tokens":32,"max_tokens":16384,
 *  "init_tokens":512,"step_tokens":512,"hold_ms":10000,"resident":false},
 *  "draft":{"source":"ngram","max":4,"min":1,"p_min":0.5}}
 *   Once, after loading, before anything else. `slots`: sequences that run
 *   at once (more wait in the engine's queue, in arrival order). `n_ctx`:
 *   the tokens one request may hold, prompt and generated: a gen needs
 *   prompt + max_tokens <= n_ctx (without max_tokens: prompt < n_ctx, and
 *   it ends with "length" at n_ctx tokens), an embed prompt <= n_ctx, else
 *   err "context_length". `n_batch`: the token budget of one step. `kv`:
 *   the KV pool shared by the slots (n_blocks blocks of block_tokens
 *   positions, bytes in all; sized by the engine's --kv-max, independent
 *   of slots x n_ctx: the requests in flight share it, and when it is full
 *   new requests wait and the youngest running one is preempted; a
 *   request that could not fit even alone, prompt + max_tokens over
 *   n_blocks x block_tokens, gets err "context_length" whose message names
 *   the KV pool, and one without max_tokens ends with "length" when it
 *   fills the pool) and its prefix cache:
 *   prefix_cache whether it is on; cache_blocks / cache_bytes the budget,
 *   the most blocks that may stay cached with no request holding them (0
 *   when off); cache_min_tokens the fewest prompt tokens a reuse must
 *   cover. The four are optional when decoding (false / 0). The pool's
 *   memory: max_tokens its positions (n_blocks x block_tokens); resident
 *   true when it was all allocated at start and never shrinks
 *   (--kv-resident); else it is elastic: memory is committed as blocks are
 *   written, init_tokens stay committed, and the rest, in steps of
 *   step_tokens, goes back to the operating system once a step's blocks
 *   have all been free for hold_ms. Optional when decoding (all five
 *   absent, or all present). `draft`: present when the engine speculates
 *   (--draft-ngram, --draft-model): the draft source ("ngram": prompt
 *   lookup; "model": a draft model), the most and fewest tokens drafted
 *   per sequence and step, and the least draft probability of a drafted
 *   token (for n-gram drafts the share of the suffix's earlier occurrences
 *   that the token followed; for a draft model its softmax probability).
 * {"op":"tok","id":7,"tokens":[450],"logprobs":[{"token":450,
 *  "logprob":-0.11,"top":[[450,-0.11],[263,-2.5]]}]}
 *   Generated tokens, in order (one or more per line). `logprobs` only
 *   when the gen asked: one entry per token, `top` (the N alternatives,
 *   most likely first) only when N >= 1. Log-probabilities are the log-
 *   softmax of the model's raw logits (before bias, penalties, temperature).
 * {"op":"plp","id":7,"from":1,"logprobs":[{"token":263,"logprob":-2.5,
 *  "rank":2,"top":[[450,-0.11],[263,-2.5]]}]}
 *   Prompt logprobs, only when the gen asked (prompt_logprobs): entry i is
 *   prompt token from + i (from >= 1), its log-probability given the
 *   prompt tokens before it (the log-softmax of the model's raw logits at
 *   the position before), its rank (1 + the tokens with larger logits) and
 *   `top` as in `tok`. In prompt order, one or more lines, all before the
 *   request's first `tok` (or its `done`): prompt tokens 1 .. n-1 each
 *   exactly once, unless the request ends early (cancelled, an error).
 * {"op":"prog","id":7,"processed":512,"total":2000,"cached":64,"ms":812.5}
 *   Prompt progress, only when the gen asked (progress): after each step
 *   that prefilled part of its prompt, the prompt tokens in the KV now
 *   (cached ones included; at most total), the prompt's tokens, those the
 *   prefix cache gave, and the milliseconds since its first prefill step.
 *   Before its first `tok`.
 * {"op":"emb","id":8,"vector":[0.1,...]}
 *   The embedding: n_embd numbers, L2-normalised.
 * {"op":"done","id":7,"finish":"stop","stats":{"prompt_n":3,"cached_n":0,
 *  "predicted_n":64,"prompt_ms":1.5,"predicted_ms":80.2,"draft_n":0,
 *  "draft_accepted_n":0}}
 *   Terminal. finish: "stop" (a stop token or end of generation, or an
 *   embedding computed), "length" (max_tokens or the context reached),
 *   "cancelled" (a `stop`). stats are this request's own: prompt_n prompt
 *   tokens evaluated (fewer than the prompt when cancelled during its
 *   prefill, 0 when cancelled while queued; cached ones included), cached_n
 *   of them taken from the prefix cache instead of computed (a multiple of
 *   the block size, or the whole prompt but its last token, which is
 *   always computed for its logits), predicted_n tokens sent in
 *   `tok` (a stop or end-of-generation token is not counted), prompt_ms
 *   from the start of its first prefill step to the end of its last one,
 *   predicted_ms from then to its terminal message, draft_n /
 *   draft_accepted_n speculative draft tokens proposed / accepted (0
 *   without speculation; accepted ones are sent in `tok` like any
 *   other, so predicted_n includes them), preempted the times the request was
 *   preempted to free KV blocks for an older one and resumed (by
 *   recomputing its prompt and generated tokens, mostly from the prefix
 *   cache; its tokens are those it would have produced unpreempted); sent
 *   only when > 0, optional when decoding (0).
 * {"op":"err","id":7,"code":"context_length","message":"..."}
 *   Terminal for the id when it has one. No `id` when the line that caused
 *   it named none that could be read (or named one already in flight: a
 *   duplicate; the message then names it). code is one of PROTO_ERR_*.
 * {"op":"pong","id":9,"steps":41,"running":true,"step_ms":812.5,
 *  "step_tokens":512,"ms_per_token":0.42,"kv":{"blocks":64,"used":17,
 *  "cached":30,"bytes":1048576,"lookup_tokens":9000,"hit_tokens":7040,
 *  "preemptions":0}}
 *   The answer to a ping, written by the engine's reader as soon as it reads
 *   the ping (after the answers to the lines before it: see "Lines the
 *   engine cannot decode" below), never held back by a step. The rest is a
 *   snapshot of the scheduler taken then:
 *     steps         steps completed since the engine started (a step is one
 *                   batched forward pass and its sampling; engine.h)
 *     running       whether a step is running now
 *     step_ms       for how long it has run (0 when none runs)
 *     step_tokens   the tokens of its batch (0 when none runs)
 *     ms_per_token  the slowest milliseconds per batch token among the last
 *                   PROTO_PONG_COST_STEPS completed steps (0 before any):
 *                   the engine's own measure of its speed, from which the
 *                   server sizes how long a step of step_tokens may take
 *     kv            the KV pool: blocks in all, used (held by running
 *                   requests), cached (listed in the prefix cache, held or
 *                   idle; idle ones are reused when no block is free),
 *                   bytes in all (the pool is allocated whole at start),
 *                   lookup_tokens / hit_tokens the prompt tokens looked up
 *                   in the prefix cache and those reused, since start,
 *                   preemptions requests preempted to free blocks for
 *                   older ones, since start, committed_bytes the pool's
 *                   bytes committed now (its steps used since they were
 *                   last given back, and the resident ones; sent when
 *                   > 0). As of the end of the last
 *                   step. cached, lookup_tokens, hit_tokens and
 *                   preemptions are optional when decoding (0).
 *   The server judges an engine *wedged* from these figures, never from the
 *   pong's arrival alone (pool.h has the rule). The progress fields come
 *   together: a pong has all of steps, running, step_ms, step_tokens and
 *   ms_per_token, or none of them (a bare {"op":"pong","id":9} is valid and
 *   says nothing about progress); `kv` is optional and whole.
 *
 * ---- Lines the engine cannot decode ----
 * A line that is not JSON, names an unknown op, breaks a field's rules or is
 * over PROTOCOL_MAX_LINE is answered with `err` by the engine's reader, like
 * a ping, in the order the lines arrived: a broken line followed by a ping
 * gets its `err` before the `pong`. The `err` names the line's id when one
 * could be read and it is not the id of a gen/embed the engine has accepted
 * and not yet ended (a broken line cannot end a request it did not make;
 * the message then names the id).
 *
 * ---- A fault-injection hook, for tests only ----
 * STRATA_TEST_HANG_AT_STEP=N (N >= 1) in the engine's environment makes its
 * scheduler block forever at the start of step N (after building that
 * step's batch, so pongs say running, with its tokens, and steps stays at
 * N-1) while the reader keeps answering pings: the "healthy but wedged"
 * engine the server's watchdog must catch. `strata serve` passes its
 * environment to its engines. Never set it in production.
 *
 * Numbers: integers are JSON integers; token ids are in [0, 2^31-1];
 * floats are written with 9 significant digits, which round-trips a C
 * float exactly. Encoders refuse NaN and infinities (except a banned
 * logit_bias, written false). */
#ifndef STRATA_ENGINE_PROTOCOL_H
#define STRATA_ENGINE_PROTOCOL_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTOCOL_VERSION 1
/* Bytes of one line without its '\n': 16 MiB, room for a prompt of about
 * two million token ids. */
#define PROTOCOL_MAX_LINE ((size_t)16 << 20)
#define PROTO_ID_MAX ((int64_t)9007199254740991) /* 2^53 - 1 */
#define PROTO_MAX_LOGPROBS 20
/* The most prompt tokens of a prompt_logprobs request prefilled per step
 * (and so the logits rows it needs at once). */
#define PROTO_PLP_CHUNK 64
#define PROTO_MAX_PENALTY_LAST_N 65536
#define PROTO_MAX_DRY_BREAKERS 16
#define PROTO_MAX_BAD_WORDS 128
#define PROTO_MAX_BAD_WORD_TOKENS 32
#define PROTO_DRY_BREAKER_BYTES 40
/* How many completed steps `pong`.ms_per_token looks back over. */
#define PROTO_PONG_COST_STEPS 32

/* Values of `err`.code. */
#define PROTO_ERR_BAD_JSON "bad_json"             /* not JSON, or not an object */
#define PROTO_ERR_BAD_REQUEST "bad_request"       /* a field missing, of the wrong type or range */
#define PROTO_ERR_UNKNOWN_OP "unknown_op"         /* `op` missing or not one this side takes */
#define PROTO_ERR_LINE_TOO_LONG "line_too_long"   /* over PROTOCOL_MAX_LINE; skipped */
#define PROTO_ERR_DUPLICATE_ID "duplicate_id"     /* the id of a request in flight */
#define PROTO_ERR_CONTEXT_LENGTH "context_length" /* prompt + max_tokens over n_ctx, or over
                                                     the KV pool's positions (the message says
                                                     which) */
#define PROTO_ERR_SHUTTING_DOWN "shutting_down"   /* gen/embed after shutdown */
#define PROTO_ERR_BAD_GRAMMAR "bad_grammar"       /* gen's grammar does not parse (the message
                                                     says where), or the model has no vocabulary
                                                     to apply one with */
#define PROTO_ERR_GRAMMAR_DEAD_END "grammar_dead_end" /* no token can continue the grammar's
                                                         output and it is not complete */
#define PROTO_ERR_INTERNAL "internal"             /* the engine failed (named in the message) */

typedef enum proto_op {
    PROTO_OP_NONE = 0,
    /* server → engine */
    PROTO_OP_GEN,
    PROTO_OP_EMBED,
    PROTO_OP_STOP,
    PROTO_OP_PING,
    PROTO_OP_SHUTDOWN,
    /* engine → server */
    PROTO_OP_READY,
    PROTO_OP_TOK,
    PROTO_OP_EMB,
    PROTO_OP_DONE,
    PROTO_OP_ERR,
    PROTO_OP_PONG,
    PROTO_OP_PLP,
    PROTO_OP_PROG,
} proto_op;

/* Which direction's ops a decoder accepts; an op of the other direction is
 * PROTO_ERR_UNKNOWN_OP. */
typedef enum proto_dir {
    PROTO_DIR_TO_ENGINE,
    PROTO_DIR_TO_SERVER,
} proto_dir;

typedef enum proto_finish {
    PROTO_FINISH_STOP,
    PROTO_FINISH_LENGTH,
    PROTO_FINISH_CANCELLED,
} proto_finish;

typedef enum proto_pooling {
    PROTO_POOLING_DEFAULT, /* absent: the model's own, else mean */
    PROTO_POOLING_MEAN,
    PROTO_POOLING_CLS,
    PROTO_POOLING_LAST,
} proto_pooling;

typedef struct proto_bias {
    int32_t token;
    float bias; /* -INFINITY: banned (false on the wire) */
} proto_bias;

typedef struct proto_sampling {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float typical_p;
    float repeat_penalty;
    float presence_penalty;
    float frequency_penalty;
    int32_t penalty_last_n;
    float top_n_sigma;
    float xtc_probability;
    float xtc_threshold;
    float dynatemp_range;
    float dynatemp_exponent;
    int32_t mirostat;
    float mirostat_tau;
    float mirostat_eta;
    float dry_multiplier;
    float dry_base;
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n;
    char dry_breakers[PROTO_MAX_DRY_BREAKERS][PROTO_DRY_BREAKER_BYTES + 1];
    size_t n_dry_breakers;
    bool has_seed;
    uint64_t seed;             /* <= INT64_MAX */
    proto_bias *logit_bias;    /* (n_logit_bias) */
    size_t n_logit_bias;
} proto_sampling;

/* The defaults above (temperature 0.8, top_k 40, ...; no seed, no bias). */
proto_sampling proto_sampling_default(void);

typedef struct proto_gen {
    int32_t *tokens;           /* (n_tokens), n_tokens >= 1 */
    size_t n_tokens;
    int64_t max_tokens;        /* -1: until the context is full */
    proto_sampling sampling;
    int32_t *stop_tokens;      /* (n_stop_tokens) */
    size_t n_stop_tokens;
    int64_t min_tokens;        /* 0: none */
    int32_t *min_bans;         /* (n_min_bans) banned until min_tokens too */
    size_t n_min_bans;
    int32_t *allowed_tokens;   /* (n_allowed_tokens); none: every token */
    size_t n_allowed_tokens;
    int32_t *bad_ids;          /* bad_words' sequences one after another */
    int32_t *bad_len;          /* (n_bad) their lengths */
    size_t n_bad;
    bool ignore_eos;
    int32_t logprobs;          /* -1: none; 0: the chosen token's; N: and the top N */
    bool prompt_logprobs;      /* `prompt_logprobs` given: the prompt's tokens' (`plp`) */
    int32_t prompt_top;        /* ... with their top N (0: none) */
    bool no_cache;             /* `cache`: false */
    bool progress;             /* `progress`: true */
    char *grammar;             /* `grammar`: GBNF text (NUL-terminated, malloc'd); NULL: none */
    bool no_speculative;       /* `speculative`: false */
    bool has_draft_max;        /* `draft_max` is present */
    int32_t draft_max;         /* `draft_max`: drafted tokens per step at most */
} proto_gen;

typedef struct proto_embed {
    int32_t *tokens;           /* (n_tokens), n_tokens >= 1 */
    size_t n_tokens;
    proto_pooling pooling;
    bool no_cache;             /* `cache`: false */
} proto_embed;

typedef struct proto_ready {
    int64_t protocol;          /* PROTOCOL_VERSION */
    const char *arch;          /* model.arch */
    int64_t n_ctx_train, n_vocab, n_embd, n_layer; /* model.* */
    int64_t slots;
    int64_t n_ctx;             /* per request */
    int64_t n_batch;
    const char *kv_type;       /* kv.type, e.g. "f16" */
    int64_t kv_block_tokens, kv_n_blocks, kv_bytes; /* kv.block_tokens, kv.n_blocks, kv.bytes */
    bool kv_prefix_cache;      /* kv.prefix_cache */
    int64_t kv_cache_blocks, kv_cache_bytes, kv_cache_min_tokens; /* kv.cache_* */
    int64_t kv_max_tokens;     /* kv.max_tokens; 0: the pool figures below are not sent */
    int64_t kv_init_tokens, kv_step_tokens, kv_hold_ms; /* kv.init_tokens, .step_tokens, .hold_ms */
    bool kv_resident;          /* kv.resident */
    const char *draft_source;  /* draft.source ("ngram"); NULL: no `draft` */
    int64_t draft_max, draft_min; /* draft.max, draft.min */
    double draft_p_min;        /* draft.p_min */
} proto_ready;

typedef struct proto_top {
    int32_t token;
    float logprob;
} proto_top;

typedef struct proto_logprob {
    int32_t token;
    float logprob;
    proto_top *top;            /* (n_top), most likely first */
    size_t n_top;
    int32_t rank;              /* `plp`: 1 + the tokens more likely; 0: not sent */
} proto_logprob;

typedef struct proto_tok {
    int32_t *tokens;           /* (n_tokens), n_tokens >= 1 */
    size_t n_tokens;
    proto_logprob *logprobs;   /* (n_tokens) or NULL */
} proto_tok;

typedef struct proto_plp {
    int64_t from;              /* the prompt position of logprobs[0], >= 1 */
    proto_logprob *logprobs;   /* (n), n >= 1 */
    size_t n;
} proto_plp;

typedef struct proto_prog {
    int64_t processed, total, cached;
    double ms;
} proto_prog;

typedef struct proto_emb {
    float *vector;             /* (n) */
    size_t n;
} proto_emb;

typedef struct proto_stats {
    int64_t prompt_n, cached_n, predicted_n;
    double prompt_ms, predicted_ms;
    int64_t draft_n, draft_accepted_n;
    int64_t preempted;         /* times the request was preempted (sent only when > 0) */
} proto_stats;

typedef struct proto_done {
    proto_finish finish;
    proto_stats stats;
} proto_done;

/* `pong`'s figures (see above). has_progress false: none were sent. */
typedef struct proto_pong {
    bool has_progress;
    int64_t steps;             /* completed since start */
    bool running;              /* a step runs now */
    double step_ms;            /* how long it has run; 0 when none */
    int64_t step_tokens;       /* its batch's tokens; 0 when none */
    double ms_per_token;       /* slowest of the recent completed steps; 0 before any */
    bool has_kv;
    int64_t kv_blocks, kv_used, kv_bytes; /* kv.blocks, kv.used, kv.bytes */
    int64_t kv_cached, kv_lookup_tokens, kv_hit_tokens, kv_preemptions; /* kv.* */
    int64_t kv_committed_bytes; /* kv.committed_bytes; sent only when > 0 */
} proto_pong;

typedef struct proto_errmsg {
    const char *code;          /* PROTO_ERR_* (any string when decoded) */
    const char *message;
} proto_errmsg;

/* One message of either direction. `has_id`/`id` are set for every op but
 * shutdown and ready (err: when it names a request). Exactly the member of
 * `u` named by `op` is meaningful.
 *
 * Ownership: a message filled by proto_decode owns every array and string
 * it points to; free them with proto_msg_free. A message built by a caller
 * for proto_encode only borrows them (proto_encode does not free). */
typedef struct proto_msg {
    proto_op op;
    bool has_id;
    int64_t id;
    union {
        proto_gen gen;
        proto_embed embed;
        proto_ready ready;
        proto_tok tok;
        proto_emb emb;
        proto_done done;
        proto_errmsg err;
        proto_pong pong;
        proto_plp plp;
        proto_prog prog;
    } u;
} proto_msg;

/* Frees what a decoded message owns and zeroes it. NULL is allowed. */
void proto_msg_free(proto_msg *m);

const char *proto_op_name(proto_op op);          /* "gen", ...; "?" for none */
const char *proto_finish_name(proto_finish f);   /* "stop", "length", "cancelled" */
const char *proto_pooling_name(proto_pooling p); /* "mean", ...; NULL for default */

/* ---- Encoding ---- */

/* A growable byte buffer that encoded lines are appended to, so a writer
 * can gather a step's lines and write them at once. */
typedef struct proto_buf {
    char *data;
    size_t len, cap;
} proto_buf;

void proto_buf_free(proto_buf *b);

/* Appends m as one line (JSON, then '\n') to out. Errors (out unchanged):
 * STRATA_EINVAL for a message that breaks the rules above (a NaN, an id out
 * of range, no tokens, ...), STRATA_ERANGE when the line would be longer
 * than PROTOCOL_MAX_LINE, STRATA_ENOMEM. */
int proto_encode(const proto_msg *m, proto_buf *out, strata_err *err);

/* Shorthand for an `err` line; id < 0 writes none. */
int proto_encode_err(proto_buf *out, int64_t id, const char *code, const char *message,
                     strata_err *err);

/* ---- Decoding ---- */

#define PROTO_ERROR_MSG_MAX 512

/* Why a line could not be decoded: what an engine puts in its `err`. */
typedef struct proto_error {
    const char *code;          /* PROTO_ERR_BAD_JSON, _BAD_REQUEST or _UNKNOWN_OP */
    proto_op op;               /* the line's op when it was one of dir's, else NONE */
    bool has_id;               /* the id, when the line had a valid one */
    int64_t id;
    char message[PROTO_ERROR_MSG_MAX]; /* names the field and what is wrong */
} proto_error;

/* Decodes one line (len bytes, without its '\n'; need not be NUL-
 * terminated) of direction dir into *out. Returns 0, or STRATA_EFORMAT with
 * *perr filled and *out zeroed (nothing to free). Never reads past len. */
int proto_decode(const char *line, size_t len, proto_dir dir, proto_msg *out, proto_error *perr);

/* Best effort: the id of a line too damaged (or too long) to decode, from
 * its first bytes: the integer after the first `"id":`. Returns true and
 * sets *id when one in range is found. */
bool proto_peek_id(const char *prefix, size_t len, int64_t *id);

/* ---- Reading lines ----
 * Bytes come in by proto_reader_feed (any split) or proto_reader_fill (one
 * read(2) of a file descriptor); proto_reader_next hands out whole lines.
 * A line longer than max_line is reported once as PROTO_READ_TOO_LONG as
 * soon as it is seen to be too long, with its first bytes (for
 * proto_peek_id); the rest of it, up to and including its '\n', is dropped,
 * and the next line is read normally. The buffer never holds more than
 * max_line + one read's bytes. */
typedef struct proto_reader {
    char *buf;
    size_t len, cap;
    size_t start;              /* first unconsumed byte */
    size_t scanned;            /* bytes from start known to hold no '\n' */
    size_t max_line;
    bool skipping;             /* dropping the rest of an oversized line */
    bool eof;
    char head[256];            /* first bytes of the last oversized line */
    size_t n_head;
} proto_reader;

enum {
    PROTO_READ_NEED_MORE = 0,  /* no whole line yet: feed or fill */
    PROTO_READ_LINE = 1,       /* *line, *len: one line (valid until the next call) */
    PROTO_READ_TOO_LONG = 2,   /* *line, *len: its first bytes (at most 256) */
    PROTO_READ_EOF = 3,        /* end of input; a last line without '\n' came before */
};

/* max_line 0 means PROTOCOL_MAX_LINE. */
void proto_reader_init(proto_reader *r, size_t max_line);
void proto_reader_free(proto_reader *r);

/* Appends n bytes. STRATA_ENOMEM on failure (nothing appended). */
int proto_reader_feed(proto_reader *r, const void *data, size_t n);

/* Marks the end of input: a last line without '\n' is then handed out. */
void proto_reader_set_eof(proto_reader *r);

/* One read(2) of fd into the buffer (retried on EINTR). Returns the number
 * of bytes read, 0 at end of file (and marks it), or STRATA_EIO /
 * STRATA_ENOMEM with err filled. */
long proto_reader_fill(proto_reader *r, int fd, strata_err *err);

/* The next line, if any: one of PROTO_READ_*. */
int proto_reader_next(proto_reader *r, const char **line, size_t *len);

#endif
