/* Logging to stderr with a level and a monotonic timestamp.
 *
 * The level comes from the environment variable STRATA_LOG (error, warn,
 * info, debug; default info) the first time anything is logged, and can be
 * set with strata_log_set_level. Each call writes one whole line, so lines
 * from different threads never interleave. */
#ifndef STRATA_BASE_LOG_H
#define STRATA_BASE_LOG_H

enum strata_log_level {
    STRATA_LOG_ERROR = 0,
    STRATA_LOG_WARN = 1,
    STRATA_LOG_INFO = 2,
    STRATA_LOG_DEBUG = 3,
};

void strata_log_set_level(enum strata_log_level level);
int strata_log_enabled(enum strata_log_level level);
void strata_log(enum strata_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define LOG_ERROR(...) strata_log(STRATA_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) strata_log(STRATA_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) strata_log(STRATA_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) strata_log(STRATA_LOG_DEBUG, __VA_ARGS__)

#endif
