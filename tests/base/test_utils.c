/* Tests of src/base: error values, the arena, the string index, mapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/arena.h"
#include "base/err.h"
#include "base/mapfile.h"
#include "base/strmap.h"
#include "testdata.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void test_err_set_formats_and_returns_code(void **state)
{
    (void)state;
    strata_err e;
    assert_int_equal(strata_err_set(&e, STRATA_EFORMAT, "bad %s at %d", "thing", 7), STRATA_EFORMAT);
    assert_int_equal(e.code, STRATA_EFORMAT);
    assert_string_equal(e.msg, "bad thing at 7");
    assert_int_equal(strata_err_set(NULL, STRATA_EIO, "ignored"), STRATA_EIO);
    strata_err_clear(&e);
    assert_int_equal(e.code, STRATA_OK);
    assert_string_equal(e.msg, "");
    assert_string_equal(strata_err_name(STRATA_ENOMEM), "out of memory");
}

static void test_arena_alignment_zeroing_and_large_blocks(void **state)
{
    (void)state;
    strata_arena a;
    strata_arena_init(&a);
    for (int i = 1; i < 2000; i++) {
        unsigned char *p = strata_arena_alloc(&a, (size_t)i);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        for (int j = 0; j < i; j++) assert_int_equal(p[j], 0);
        memset(p, 0xab, (size_t)i);
    }
    /* A block bigger than a chunk, then small ones again. */
    unsigned char *big = strata_arena_alloc(&a, 1 << 20);
    assert_non_null(big);
    memset(big, 1, 1 << 20);
    assert_non_null(strata_arena_alloc(&a, 8));
    assert_null(strata_arena_calloc(&a, SIZE_MAX / 2, 4)); /* overflow is refused */
    assert_null(strata_arena_alloc(&a, SIZE_MAX - 3));
    strata_arena_free(&a);
    assert_int_equal(a.n_bytes, 0);
}

static void test_strmap_put_get_duplicates(void **state)
{
    (void)state;
    enum { N = 1000 };
    static char keys[N][16];
    strata_strmap m;
    assert_int_equal(strata_strmap_init(&m, N), 0);
    for (int i = 0; i < N; i++) {
        snprintf(keys[i], sizeof(keys[i]), "blk.%d.w", i);
        assert_int_equal(strata_strmap_put(&m, keys[i], strlen(keys[i]), i, NULL), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(strata_strmap_get(&m, keys[i], strlen(keys[i])), i);
    }
    int64_t prev = -1;
    assert_int_equal(strata_strmap_put(&m, "blk.7.w", 7, 99, &prev), 1);
    assert_int_equal(prev, 7);
    assert_int_equal(strata_strmap_get(&m, "blk.7.w", 7), 7);
    assert_int_equal(strata_strmap_get(&m, "blk.7", 5), -1); /* a prefix is another key */
    assert_int_equal(strata_strmap_get(&m, "", 0), -1);
    strata_strmap_free(&m);
}

static void test_mapfile_reads_and_reports_errors(void **state)
{
    (void)state;
    const char *dir = testdata_scratch_dir();
    assert_non_null(dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s/x.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("hello", f);
    fclose(f);

    strata_mapfile m;
    strata_err e;
    assert_int_equal(strata_mapfile_open(&m, path, &e), 0);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    strata_mapfile_close(&m);

    snprintf(path, sizeof(path), "%s/empty.bin", dir);
    f = fopen(path, "wb");
    fclose(f);
    assert_int_equal(strata_mapfile_open(&m, path, &e), 0);
    assert_int_equal(m.size, 0);
    assert_null(m.data);
    strata_mapfile_close(&m);

    snprintf(path, sizeof(path), "%s/missing.bin", dir);
    assert_int_equal(strata_mapfile_open(&m, path, &e), STRATA_ENOTFOUND);
    assert_non_null(strstr(e.msg, "missing.bin"));
    assert_int_equal(strata_mapfile_open(&m, dir, &e), STRATA_EIO); /* a folder */
    assert_non_null(strstr(e.msg, "not a regular file"));
}

/* Kilobytes of the mapping that starts at p resident in this process
 * (/proc/self/smaps "Rss:"), or -1 when it cannot be read. */
static long mapping_rss_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (f == NULL) return -1;
    char line[512];
    bool in = false;
    long kb = -1;
    unsigned long start = 0, end = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = start == (unsigned long)(uintptr_t)p;
        } else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return in ? kb : -1;
}

static void test_mapfile_release_drops_pages_keeps_bytes(void **state)
{
    (void)state;
    const char *dir = testdata_scratch_dir();
    assert_non_null(dir);
    char path[4200];
    snprintf(path, sizeof(path), "%s/pages.bin", dir);
    const size_t n = (size_t)1 << 20;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc((int)((i * 131u + (i >> 12)) & 0xff), f);
    fclose(f);

    strata_mapfile m;
    strata_err e;
    assert_int_equal(strata_mapfile_open(&m, path, &e), 0);
    /* read every page (and check what was read, so the reads stay) */
    unsigned sum = 0, want = 0;
    for (size_t i = 0; i < n; i += 512) {
        sum += m.data[i];
        want += (uint8_t)((i * 131u + (i >> 12)) & 0xff);
    }
    assert_int_equal(sum, want);
    long before = mapping_rss_kb(m.data);
    if (before < 0) {
        strata_mapfile_close(&m);
        skip(); /* no /proc/self/smaps here */
    }
    assert_true(before >= 1000); /* every page touched: ~1024 kB */

    /* ranges that do not lie in the map change nothing */
    strata_mapfile_release(&m, m.data + 4096, n); /* runs past the end */
    strata_mapfile_release(&m, m.data - 4096, 8192);
    assert_true(mapping_rss_kb(m.data) >= 1000);

    /* the pages wholly inside go; the partial first and last stay */
    strata_mapfile_release(&m, m.data + 100, n - 200);
    long page_kb = sysconf(_SC_PAGESIZE) / 1024;
    assert_true(mapping_rss_kb(m.data) <= 2 * page_kb);

    /* and the bytes read back are the file's */
    for (size_t i = 0; i < n; i++) {
        if (m.data[i] != (uint8_t)((i * 131u + (i >> 12)) & 0xff)) fail_msg("byte %zu changed", i);
    }
    assert_true(mapping_rss_kb(m.data) >= 1000);
    strata_mapfile_close(&m);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_set_formats_and_returns_code),
        cmocka_unit_test(test_arena_alignment_zeroing_and_large_blocks),
        cmocka_unit_test(test_strmap_put_get_duplicates),
        cmocka_unit_test(test_mapfile_reads_and_reports_errors),
        cmocka_unit_test(test_mapfile_release_drops_pages_keeps_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
