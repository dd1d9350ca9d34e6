/* Error codes and their message buffer (see err.h). */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

int strata_err_set(strata_err *err, int code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void strata_err_clear(strata_err *err)
{
    if (err != NULL) {
        err->code = STRATA_OK;
        err->msg[0] = '\0';
    }
}

const char *strata_err_name(int code)
{
    switch (code) {
    case STRATA_OK: return "ok";
    case STRATA_EINVAL: return "invalid argument";
    case STRATA_EIO: return "I/O error";
    case STRATA_ENOMEM: return "out of memory";
    case STRATA_EFORMAT: return "format error";
    case STRATA_EUNSUPPORTED: return "unsupported";
    case STRATA_ENOTFOUND: return "not found";
    case STRATA_ERANGE: return "out of range";
    default: return "unknown error";
    }
}
