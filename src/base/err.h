/* Error values shared by every layer.
 *
 * Library code returns 0 on success or one of the negative STRATA_E* codes
 * below, and fills a strata_err with a message a person can act on (for a
 * file: its name, the byte offset and what was wrong). Nothing under src/
 * exits or aborts because of bad input; assert() is for bugs only. */
#ifndef STRATA_BASE_ERR_H
#define STRATA_BASE_ERR_H

#include <stddef.h>

enum strata_errcode {
    STRATA_OK = 0,
    STRATA_EINVAL = -1,       /* bad argument from the caller */
    STRATA_EIO = -2,          /* an OS call failed (open, read, mmap, write) */
    STRATA_ENOMEM = -3,       /* allocation failed */
    STRATA_EFORMAT = -4,      /* input bytes do not follow the format */
    STRATA_EUNSUPPORTED = -5, /* valid input that this build cannot handle */
    STRATA_ENOTFOUND = -6,    /* a key, tensor or file that is not there */
    STRATA_ERANGE = -7,       /* a value outside what the caller can take */
};

#define STRATA_ERR_MSG_MAX 512

/* A message buffer that travels with a returned code. The code is repeated
 * here so a caller that only keeps the struct still knows what happened. */
typedef struct strata_err {
    int code;
    char msg[STRATA_ERR_MSG_MAX];
} strata_err;

/* Records code and a printf-style message in err (which may be NULL) and
 * returns code, so a failing path reads `return strata_err_set(err, ...)`. */
int strata_err_set(strata_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to "no error". err may be NULL. */
void strata_err_clear(strata_err *err);

/* A short constant name for a code ("format error", "I/O error", ...). */
const char *strata_err_name(int code);

#endif
