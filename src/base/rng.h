/* A small seeded random number generator (xoshiro256**, seeded through
 * splitmix64). Deterministic across platforms: the same seed gives the same
 * stream everywhere, which seeded generation and sampling rely on. Each
 * user owns its own state; nothing here is shared. */
#ifndef STRATA_BASE_RNG_H
#define STRATA_BASE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct strata_rng {
    uint64_t s[4];
} strata_rng;

static inline uint64_t strata_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline void strata_rng_seed(strata_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = strata_splitmix64(&seed);
}

static inline uint64_t strata_rng_next(strata_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double strata_rng_uniform(strata_rng *r)
{
    return (double)(strata_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller (one value per call; the pair's second value
 * is dropped to keep the state a plain four words). */
static inline double strata_rng_normal(strata_rng *r)
{
    double u1 = strata_rng_uniform(r);
    double u2 = strata_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
