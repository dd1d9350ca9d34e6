/* Monotonic clock readings for durations (never wall-clock time). */
#ifndef STRATA_BASE_CLOCK_H
#define STRATA_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC since an arbitrary origin. */
static inline int64_t strata_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double strata_clock_ms(void)
{
    return (double)strata_clock_ns() / 1e6;
}

#endif
