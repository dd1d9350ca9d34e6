/* Reference data and scratch folders for tests (see testdata.h). */
#define _GNU_SOURCE
#include "testdata.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef STRATA_SOURCE_DIR
#error "STRATA_SOURCE_DIR must name the project's root"
#endif
#ifndef STRATA_BUILD_DIR
#error "STRATA_BUILD_DIR must name the build folder"
#endif

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *testdata_source_dir(void)
{
    return STRATA_SOURCE_DIR;
}

const char *testdata_dir(void)
{
    static char dir[4096];
    static int looked;
    if (!looked) {
        looked = 1;
        const char *env = getenv("STRATA_TEST_DATA");
        if (env != NULL && env[0] != '\0' && is_dir(env)) {
            snprintf(dir, sizeof(dir), "%s", env);
        } else if (is_dir(STRATA_SOURCE_DIR "/../shared/data")) {
            snprintf(dir, sizeof(dir), "%s", STRATA_SOURCE_DIR "/../shared/data");
        }
    }
    return dir[0] != '\0' ? dir : NULL;
}

char *testdata_path(char *out, size_t out_size, const char *rel)
{
    const char *d = testdata_dir();
    if (d == NULL) return NULL;
    snprintf(out, out_size, "%s/%s", d, rel);
    return access(out, R_OK) == 0 ? out : NULL;
}

static char g_scratch[4096];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void scratch_cleanup(void)
{
    if (g_scratch[0] != '\0') nftw(g_scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *testdata_scratch_dir(void)
{
    if (g_scratch[0] == '\0') {
        mkdir(STRATA_BUILD_DIR "/tmp", 0755);
        snprintf(g_scratch, sizeof(g_scratch), "%s", STRATA_BUILD_DIR "/tmp/test-XXXXXX");
        if (mkdtemp(g_scratch) == NULL) {
            g_scratch[0] = '\0';
            return NULL;
        }
        atexit(scratch_cleanup);
    }
    return g_scratch;
}

void *testdata_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf == NULL || (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n)) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}
