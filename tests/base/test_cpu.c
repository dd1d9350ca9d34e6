/* Tests of CPU feature detection and the SIMD level (src/base/cpu.h).
 *
 * main() sets STRATA_CPU=scalar before anything reads it, so this program
 * also checks that the cap reaches strata_cpu_level() while the reported
 * features stay the machine's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the first calls, from many threads at once --- */

enum { N_RACERS = 8 };

static void *racer(void *arg)
{
    uintptr_t *out = arg;
    const strata_cpu *c = strata_cpu_get();
    out[0] = (uintptr_t)c;
    out[1] = (uintptr_t)strata_cpu_level();
    return NULL;
}

/* Runs first: no call into cpu.c has happened yet in this process. */
static void test_first_calls_race_safely_and_env_cap_applies(void **state)
{
    (void)state;
    pthread_t th[N_RACERS];
    uintptr_t seen[N_RACERS][2];
    for (int i = 0; i < N_RACERS; i++) assert_int_equal(pthread_create(&th[i], NULL, racer, seen[i]), 0);
    for (int i = 0; i < N_RACERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < N_RACERS; i++) {
        assert_int_equal(seen[i][0], (uintptr_t)strata_cpu_get());
        /* STRATA_CPU=scalar, set by main. */
        assert_int_equal(seen[i][1], STRATA_SIMD_SCALAR);
    }
    assert_int_equal(strata_cpu_level(), STRATA_SIMD_SCALAR);

    char buf[512];
    strata_cpu_describe(buf, sizeof buf);
    print_message("cpu: %s (max level %s)\n", buf,
                  strata_simd_level_name(strata_cpu_level_max(strata_cpu_get())));
    assert_non_null(strstr(buf, "simd scalar"));
    if (strata_cpu_level_max(strata_cpu_get()) > STRATA_SIMD_SCALAR)
        assert_non_null(strstr(buf, "capped by STRATA_CPU=scalar"));
    /* a level below AVX512 keeps the AMX kernels off too, on any CPU */
    assert_false(strata_cpu_amx());
    assert_null(strstr(buf, "with amx"));
}

/* --- the level as a function of the features --- */

static void test_level_needs_every_feature_of_it(void **state)
{
    (void)state;
    strata_cpu c;
    memset(&c, 0, sizeof c);
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_SCALAR);

    c.avx2 = c.fma = true; /* no f16c */
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_SCALAR);
    c.f16c = true;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_AVX2);

    c.avx512f = c.avx512bw = c.avx512vl = true; /* no vnni */
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_AVX2);
    c.avx512vnni = true;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_AVX512);
    c.avx512bw = false;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_AVX2);
    c.avx512bw = true;

    /* AVX-512 without the AVX2 level's features is not AVX-512 level. */
    c.fma = false;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_SCALAR);
    c.fma = true;
    c.avx2 = false;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_SCALAR);

    /* Neither bf16 nor avx_vnni is needed by a level. */
    memset(&c, 0, sizeof c);
    c.avx512bf16 = c.avx_vnni = true;
    assert_int_equal(strata_cpu_level_max(&c), STRATA_SIMD_SCALAR);
}

static void test_cap_lowers_never_raises(void **state)
{
    (void)state;
    strata_cpu big, mid, none;
    memset(&big, 0, sizeof big);
    big.avx2 = big.fma = big.f16c = true;
    mid = big;
    big.avx512f = big.avx512bw = big.avx512vl = big.avx512vnni = true;
    memset(&none, 0, sizeof none);

    assert_int_equal(strata_cpu_level_capped(&big, NULL), STRATA_SIMD_AVX512);
    assert_int_equal(strata_cpu_level_capped(&big, ""), STRATA_SIMD_AVX512);
    assert_int_equal(strata_cpu_level_capped(&big, "auto"), STRATA_SIMD_AVX512);
    assert_int_equal(strata_cpu_level_capped(&big, "avx512"), STRATA_SIMD_AVX512);
    assert_int_equal(strata_cpu_level_capped(&big, "avx2"), STRATA_SIMD_AVX2);
    assert_int_equal(strata_cpu_level_capped(&big, "AVX2"), STRATA_SIMD_AVX2);
    assert_int_equal(strata_cpu_level_capped(&big, "scalar"), STRATA_SIMD_SCALAR);

    assert_int_equal(strata_cpu_level_capped(&mid, "avx512"), STRATA_SIMD_AVX2);
    assert_int_equal(strata_cpu_level_capped(&mid, "scalar"), STRATA_SIMD_SCALAR);
    assert_int_equal(strata_cpu_level_capped(&none, "avx512"), STRATA_SIMD_SCALAR);
    assert_int_equal(strata_cpu_level_capped(&none, "avx2"), STRATA_SIMD_SCALAR);

    assert_int_equal(strata_cpu_level_capped(&big, "sse4"), -1);
    assert_int_equal(strata_cpu_level_capped(&big, "avx2 "), -1);

    assert_string_equal(strata_simd_level_name(STRATA_SIMD_SCALAR), "scalar");
    assert_string_equal(strata_simd_level_name(STRATA_SIMD_AVX2), "avx2");
    assert_string_equal(strata_simd_level_name(STRATA_SIMD_AVX512), "avx512");
}

/* --- what this machine reports --- */

static void test_detection_is_consistent(void **state)
{
    (void)state;
    const strata_cpu *c = strata_cpu_get();
    assert_ptr_equal(c, strata_cpu_get());
#if defined(__x86_64__)
    assert_true(c->x86_64);
    assert_true(c->vendor[0] != '\0');
#else
    assert_false(c->x86_64);
#endif
    /* Register state first: nothing 256-bit without YMM, nothing AVX-512
     * without ZMM. */
    if (c->avx2 || c->fma || c->f16c || c->avx_vnni) assert_true(c->os_ymm);
    if (c->avx512f || c->avx512bw || c->avx512vl || c->avx512vnni || c->avx512bf16) assert_true(c->os_zmm);
    if (c->os_zmm) assert_true(c->os_ymm);

    enum strata_simd_level max = strata_cpu_level_max(c);
    if (max >= STRATA_SIMD_AVX2) assert_true(c->avx2 && c->fma && c->f16c);
    if (max == STRATA_SIMD_AVX512)
        assert_true(c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni);
    /* The process level is the capped one (main set STRATA_CPU=scalar). */
    assert_int_equal(strata_cpu_level(), strata_cpu_level_capped(c, getenv("STRATA_CPU")));
}

#if defined(__x86_64__) && defined(__linux__)
/* The kernel's view of the same bits: /proc/cpuinfo lists a flag only when
 * the CPU has it and the kernel enabled its register state. */
static int cpuinfo_has(const char *flags, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)) != NULL; p += len)
        if ((p == flags || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\n' || p[len] == '\0')) return 1;
    return 0;
}
#endif

static void test_detection_agrees_with_kernel_and_compiler(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__linux__)
    const strata_cpu *c = strata_cpu_get();
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) {
        print_message("skipped: no /proc/cpuinfo\n");
        skip();
    }
    static char line[8192];
    char *flags = NULL;
    while (fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "flags", 5) == 0) {
            flags = strchr(line, ':');
            break;
        }
    fclose(f);
    assert_non_null(flags);

    static const struct {
        const char *flag;
        size_t offset;
        int old; /* known to every kernel we would run on: checked both ways */
    } map[] = {
        {"avx2", offsetof(strata_cpu, avx2), 1},
        {"fma", offsetof(strata_cpu, fma), 1},
        {"f16c", offsetof(strata_cpu, f16c), 1},
        {"avx512f", offsetof(strata_cpu, avx512f), 1},
        {"avx512bw", offsetof(strata_cpu, avx512bw), 1},
        {"avx512vl", offsetof(strata_cpu, avx512vl), 1},
        {"avx512_vnni", offsetof(strata_cpu, avx512vnni), 0},
        {"avx512_bf16", offsetof(strata_cpu, avx512bf16), 0},
        {"avx_vnni", offsetof(strata_cpu, avx_vnni), 0},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        int ours = *(const bool *)((const char *)c + map[i].offset);
        int kernel = cpuinfo_has(flags, map[i].flag);
        if (kernel && !ours) fail_msg("/proc/cpuinfo has %s, detection does not", map[i].flag);
        if (ours && !kernel && map[i].old) fail_msg("detected %s, /proc/cpuinfo does not list it", map[i].flag);
    }

    /* And the compiler runtime's own detection (which also checks XCR0). */
    __builtin_cpu_init();
    assert_int_equal(c->avx2, !!__builtin_cpu_supports("avx2"));
    assert_int_equal(c->fma, !!__builtin_cpu_supports("fma"));
    assert_int_equal(c->avx512f, !!__builtin_cpu_supports("avx512f"));
    assert_int_equal(c->avx512bw, !!__builtin_cpu_supports("avx512bw"));
    assert_int_equal(c->avx512vl, !!__builtin_cpu_supports("avx512vl"));
#else
    print_message("skipped: not x86-64 Linux\n");
    skip();
#endif
}

static void test_describe_truncates_safely(void **state)
{
    (void)state;
    char buf[512], small[12];
    memset(small, 'x', sizeof small);
    assert_ptr_equal(strata_cpu_describe(small, sizeof small), small);
    assert_int_equal(strlen(small), sizeof small - 1);
    strata_cpu_describe(buf, sizeof buf);
    assert_memory_equal(small, buf, sizeof small - 1);
    char one = 'x';
    strata_cpu_describe(&one, 1);
    assert_int_equal(one, '\0');
    assert_null(strata_cpu_describe(NULL, 0));
    if (strata_cpu_get()->avx2) assert_non_null(strstr(buf, "avx2"));
    if (strata_cpu_get()->avx512f) assert_non_null(strstr(buf, "avx512f"));
}

int main(void)
{
    /* Before any call into cpu.c: the cap is read once, on the first. */
    setenv("STRATA_CPU", "scalar", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_calls_race_safely_and_env_cap_applies),
        cmocka_unit_test(test_level_needs_every_feature_of_it),
        cmocka_unit_test(test_cap_lowers_never_raises),
        cmocka_unit_test(test_detection_is_consistent),
        cmocka_unit_test(test_detection_agrees_with_kernel_and_compiler),
        cmocka_unit_test(test_describe_truncates_safely),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
