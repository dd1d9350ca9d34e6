/* Turning one position's logits into the next token, per sequence.
 *
 * The chain, in order (llama.cpp's default order): logit bias →
 * repetition / presence / frequency penalties over the last N tokens →
 * DRY (repeated sequences) → top-n-sigma → top-k → typical → top-p → min-p → XTC → temperature (or
 * the dynamic temperature) → a draw from the sequence's own RNG. With
 * temperature <= 0 (and neither XTC nor a dynamic temperature on) the draw
 * is replaced by the argmax (after bias and penalties; ties go to the
 * lowest id), so greedy decoding needs no RNG at all. Mirostat replaces
 * everything after the bias by temperature then its own truncation, which
 * keeps a state (mu) that each sample updates.
 *
 * Isolation: a sampler belongs to one sequence. Its RNG is seeded from the
 * request's seed and advanced only by that sequence's draws, so a seeded
 * request gives the same tokens whatever else runs. Nothing is shared
 * between samplers, and sampling allocates nothing: every buffer is sized
 * at sampler_new from the vocabulary size. */
#ifndef STRATA_SAMPLE_SAMPLER_H
#define STRATA_SAMPLE_SAMPLER_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sample_bias {
    int32_t token;
    float bias; /* added to the logit; -INFINITY bans the token */
} sample_bias;

/* DRY's restart sequences, as token ids: a head token and the tokens
 * that follow it in the text (the tail; none for a
 * sequence breaker inside one token). Made from the breaker strings by
 * whoever has the vocabulary (the engine). */
#define SAMPLE_DRY_MAX_TAIL 20
typedef struct sample_dry_breaker {
    int32_t head;
    int32_t tail[SAMPLE_DRY_MAX_TAIL];
    int32_t n_tail;
} sample_dry_breaker;

typedef struct sample_params {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float typical_p;         /* >= 1: off */
    float repeat_penalty;    /* 1: off; > 1 discourages repeats (divides positive logits) */
    float presence_penalty;  /* 0: off; subtracted once from every token seen */
    float frequency_penalty; /* 0: off; subtracted once per occurrence */
    int32_t penalty_last_n;  /* tokens of history the penalties look at; 0: off */
    float top_n_sigma;       /* <= 0: off; keeps logits >= max - n x their std deviation */
    float xtc_probability;   /* <= 0: off; the chance per token that XTC cuts */
    float xtc_threshold;     /* > 0.5: off; XTC drops every token of at least this
                                probability but the least likely of them */
    float dynatemp_range;    /* <= 0: off; the temperature then moves in
                                [max(0, t - range), t + range] with the entropy */
    float dynatemp_exponent; /* how the normalised entropy maps into that range */
    int32_t mirostat;        /* 0 off; 1 or 2: Mirostat 1.0 / 2.0 instead of the chain
                                after the bias (no penalties, top-k/p ... : llama.cpp's) */
    float mirostat_tau;      /* its target surprise (bits) */
    float mirostat_eta;      /* its learning rate */
    float dry_multiplier;    /* 0: off; DRY subtracts multiplier x base^(n - allowed)
                                from a token that would extend a repeat of n >= allowed
                                tokens of the last dry_penalty_last_n */
    float dry_base;          /* < 1: off */
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n; /* 0: off */
    const sample_dry_breaker *dry_breakers; /* copied at sampler_new; a repeat never
                                               reaches back past one */
    size_t n_dry_breakers;
    uint64_t seed;
    const sample_bias *bias; /* copied at sampler_new */
    size_t n_bias;
} sample_params;

/* The defaults of `strata run` (the same as llama.cpp's command line):
 * temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no penalties, last 64. */
sample_params sample_params_default(void);

typedef struct sampler sampler;

/* A sampler for one sequence over a vocabulary of n_vocab tokens. Bias
 * entries whose token is outside the vocabulary are STRATA_EINVAL. */
int sampler_new(sampler **out, const sample_params *p, int32_t n_vocab, strata_err *err);
void sampler_free(sampler *s);

/* Records a token in the penalty history (prompt tokens may be recorded
 * too; the caller decides). Tokens outside the vocabulary are ignored. */
void sampler_accept(sampler *s, int32_t token);

/* Picks the next token from logits[n_vocab] (not modified). Does not
 * record it: call sampler_accept with the result. */
int32_t sampler_sample(sampler *s, const float *logits);

#endif
