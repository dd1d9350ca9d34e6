/* Whole-file read-only mmap (see mapfile.h). */
#define _GNU_SOURCE
#include "mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int strata_mapfile_open(strata_mapfile *map, const char *path, strata_err *err)
{
    map->data = NULL;
    map->size = 0;

    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int code = errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO;
        return strata_err_set(err, code, "%s: cannot open: %s", path, strerror(errno));
    }

    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return strata_err_set(err, STRATA_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return strata_err_set(err, STRATA_EIO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return strata_err_set(err, STRATA_EIO, "%s: too large to map", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return STRATA_OK;
    }

    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps its own reference to the file */
    if (p == MAP_FAILED) {
        return strata_err_set(err, STRATA_EIO, "%s: cannot mmap %lld bytes: %s", path,
                              (long long)st.st_size, strerror(e));
    }
    map->data = p;
    map->size = (size_t)st.st_size;
    return STRATA_OK;
}

void strata_mapfile_release(const strata_mapfile *map, const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)map->data;
    if (map->data == NULL || a < base || n > map->size || a - base > map->size - n) return;
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t lo = (a + page - 1) / page * page, hi = (a + n) / page * page;
    /* a private mapping that was never written: MADV_DONTNEED drops the
     * pages, and the next access reads them from the file again */
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void strata_mapfile_close(strata_mapfile *map)
{
    if (map->data != NULL) munmap((void *)map->data, map->size);
    map->data = NULL;
    map->size = 0;
}
