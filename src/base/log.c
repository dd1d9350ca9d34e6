/* Level-filtered logging to stderr (see log.h). */
#include "log.h"

#include "clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* -1 means "not read from the environment yet". A race between two first
 * callers is harmless: both compute the same value. */
static volatile int g_level = -1;
static int64_t g_origin_ns;

static int level_from_env(void)
{
    const char *s = getenv("STRATA_LOG");
    if (s == NULL) return STRATA_LOG_INFO;
    if (strcasecmp(s, "error") == 0) return STRATA_LOG_ERROR;
    if (strcasecmp(s, "warn") == 0) return STRATA_LOG_WARN;
    if (strcasecmp(s, "debug") == 0) return STRATA_LOG_DEBUG;
    return STRATA_LOG_INFO;
}

void strata_log_set_level(enum strata_log_level level)
{
    if (g_origin_ns == 0) g_origin_ns = strata_clock_ns();
    g_level = (int)level;
}

int strata_log_enabled(enum strata_log_level level)
{
    if (g_level < 0) strata_log_set_level((enum strata_log_level)level_from_env());
    return (int)level <= g_level;
}

void strata_log(enum strata_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    if (!strata_log_enabled(level)) return;

    /* Format into one buffer and write it with one call: whole lines. */
    char line[2048];
    double t = (double)(strata_clock_ns() - g_origin_ns) / 1e9;
    int n = snprintf(line, sizeof(line), "[%9.3f] %-5s ", t, names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2) len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w;
    size_t off = 0;
    while (off < len) {
        w = write(STDERR_FILENO, line + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) break; /* nowhere to report a failed log write */
        off += (size_t)w;
    }
}
