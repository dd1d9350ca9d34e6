/* Read-only memory mapping of a whole file.
 *
 * Weights are used in place from the mapping: nothing is copied. An empty
 * file maps to data == NULL, size == 0 (mmap refuses zero lengths). */
#ifndef STRATA_BASE_MAPFILE_H
#define STRATA_BASE_MAPFILE_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct strata_mapfile {
    const uint8_t *data; /* size bytes, valid until strata_mapfile_close */
    size_t size;
} strata_mapfile;

/* Maps path read-only. On failure returns STRATA_EIO (or STRATA_ENOTFOUND
 * when the file does not exist) with "path: reason" in err, and leaves *map
 * empty. */
int strata_mapfile_open(strata_mapfile *map, const char *path, strata_err *err);

/* Gives the pages wholly inside [p, p + n) back to the operating system
 * when that range lies in the map (else does nothing): the process's
 * resident memory stops counting them, and a later read of them faults the
 * file's bytes in again, so the contents seen are unchanged. For data the
 * process has copied elsewhere (repacked weights). */
void strata_mapfile_release(const strata_mapfile *map, const void *p, size_t n);

/* Unmaps. Safe on an empty or already closed map. */
void strata_mapfile_close(strata_mapfile *map);

#endif
