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

/* Unmaps. Safe on an empty or already closed map. */
void strata_mapfile_close(strata_mapfile *map);

#endif
