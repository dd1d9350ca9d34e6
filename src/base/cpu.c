/* CPU feature detection (see cpu.h).
 *
 * On x86-64 a feature counts only when both the CPU reports it (CPUID) and
 * the OS saves the registers it uses (XCR0, read with XGETBV, which itself is
 * only legal when CPUID says OSXSAVE). Bits used, from the Intel SDM vol. 2A
 * "CPUID" and vol. 1 §13.3:
 *
 *   leaf 1        ECX: 12 FMA, 27 OSXSAVE, 28 AVX, 29 F16C
 *   leaf 7.0      EBX: 5 AVX2, 16 AVX512F, 30 AVX512BW, 31 AVX512VL
 *                 ECX: 11 AVX512_VNNI
 *                 EDX: 24 AMX-TILE, 25 AMX-INT8
 *   leaf 7.1      EAX: 4 AVX_VNNI, 5 AVX512_BF16
 *   XCR0          bits 1-2 SSE+AVX state (YMM), 5-7 opmask+ZMM_Hi256+Hi16_ZMM,
 *                 17-18 XTILECFG+XTILEDATA (AMX)
 *
 * Detection runs once under pthread_once; afterwards everything is read-only
 * static data, so any thread may read it without locks. */
#include "cpu.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static strata_cpu g_cpu;
static enum strata_simd_level g_level;
static char g_cap[16]; /* the STRATA_CPU value that lowered the level, or "" */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
static unsigned long long cpu_xgetbv0(void)
{
    unsigned int eax, edx;
    /* XGETBV with ECX = 0 reads XCR0. Encoded as bytes so that no -mxsave
     * (or target attribute) is needed. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void cpu_detect_x86(strata_cpu *c)
{
    unsigned int a, b, cx, d;
    c->x86_64 = true;

    unsigned int max_leaf = (unsigned int)__get_cpuid_max(0, NULL);
    if (max_leaf == 0) return;
    __cpuid(0, a, b, cx, d);
    memcpy(c->vendor + 0, &b, 4);
    memcpy(c->vendor + 4, &d, 4);
    memcpy(c->vendor + 8, &cx, 4);
    c->vendor[12] = '\0';

    if ((unsigned int)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        unsigned int regs[12];
        for (unsigned int i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[4 * i + 0], regs[4 * i + 1], regs[4 * i + 2],
                    regs[4 * i + 3]);
        memcpy(c->brand, regs, 48);
        c->brand[48] = '\0';
        /* Brand strings are padded with leading spaces on some parts. */
        size_t skip = strspn(c->brand, " ");
        memmove(c->brand, c->brand + skip, strlen(c->brand + skip) + 1);
    }

    __cpuid(1, a, b, cx, d);
    bool has_fma = (cx >> 12) & 1, has_osxsave = (cx >> 27) & 1;
    bool has_avx = (cx >> 28) & 1, has_f16c = (cx >> 29) & 1;

    unsigned long long xcr0 = has_osxsave ? cpu_xgetbv0() : 0;
    c->os_ymm = has_avx && (xcr0 & 0x6) == 0x6;
    c->os_zmm = c->os_ymm && (xcr0 & 0xe0) == 0xe0;

    /* FMA and F16C are VEX-encoded: they need the YMM state like AVX does. */
    c->fma = c->os_ymm && has_fma;
    c->f16c = c->os_ymm && has_f16c;

    if (max_leaf < 7) return;
    __cpuid_count(7, 0, a, b, cx, d);
    unsigned int max_subleaf7 = a;
    c->avx2 = c->os_ymm && ((b >> 5) & 1);
    c->avx512f = c->os_zmm && ((b >> 16) & 1);
    c->avx512bw = c->os_zmm && ((b >> 30) & 1);
    c->avx512vl = c->os_zmm && ((b >> 31) & 1);
    c->avx512vnni = c->os_zmm && ((cx >> 11) & 1);
    c->amx_int8 = (xcr0 & 0x60000) == 0x60000 && ((d >> 24) & 1) && ((d >> 25) & 1);

    if (max_subleaf7 < 1) return;
    __cpuid_count(7, 1, a, b, cx, d);
    c->avx_vnni = c->os_ymm && ((a >> 4) & 1);
    c->avx512bf16 = c->os_zmm && ((a >> 5) & 1);
}
#endif

enum strata_simd_level strata_cpu_level_max(const strata_cpu *cpu)
{
    bool avx2 = cpu->avx2 && cpu->fma && cpu->f16c;
    if (!avx2) return STRATA_SIMD_SCALAR;
    if (cpu->avx512f && cpu->avx512bw && cpu->avx512vl && cpu->avx512vnni) return STRATA_SIMD_AVX512;
    return STRATA_SIMD_AVX2;
}

int strata_cpu_level_capped(const strata_cpu *cpu, const char *cap)
{
    enum strata_simd_level level = strata_cpu_level_max(cpu);
    enum strata_simd_level limit;
    if (cap == NULL || cap[0] == '\0' || strcasecmp(cap, "auto") == 0) return (int)level;
    if (strcasecmp(cap, "scalar") == 0) limit = STRATA_SIMD_SCALAR;
    else if (strcasecmp(cap, "avx2") == 0) limit = STRATA_SIMD_AVX2;
    else if (strcasecmp(cap, "avx512") == 0) limit = STRATA_SIMD_AVX512;
    else return -1;
    return (int)(level < limit ? level : limit);
}

const char *strata_simd_level_name(enum strata_simd_level level)
{
    switch (level) {
    case STRATA_SIMD_SCALAR: return "scalar";
    case STRATA_SIMD_AVX2: return "avx2";
    case STRATA_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

static void cpu_init_once(void)
{
#if defined(__x86_64__)
    cpu_detect_x86(&g_cpu);
#elif defined(__aarch64__)
    g_cpu.aarch64 = true;
#endif
    const char *cap = getenv("STRATA_CPU");
    int level = strata_cpu_level_capped(&g_cpu, cap);
    if (level < 0) {
        LOG_WARN("STRATA_CPU=%s is not one of scalar, avx2, avx512, auto: ignored", cap);
        level = (int)strata_cpu_level_max(&g_cpu);
    } else if (level < (int)strata_cpu_level_max(&g_cpu)) {
        snprintf(g_cap, sizeof(g_cap), "%s", cap);
    }
    g_level = (enum strata_simd_level)level;
}

const strata_cpu *strata_cpu_get(void)
{
    pthread_once(&g_once, cpu_init_once);
    return &g_cpu;
}

enum strata_simd_level strata_cpu_level(void)
{
    pthread_once(&g_once, cpu_init_once);
    return g_level;
}

static bool g_amx;
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;

static void amx_init_once(void)
{
    const strata_cpu *c = strata_cpu_get();
    if (!c->amx_int8 || strata_cpu_level() < STRATA_SIMD_AVX512) return;
    const char *env = getenv("STRATA_AMX");
    if (env != NULL && strcmp(env, "0") == 0) return;
#if defined(__linux__) && defined(__x86_64__)
    /* Linux hands out the 8 KiB tile state only on request (ARCH_REQ_XCOMP_PERM
     * 0x1023 for XFEATURE_XTILEDATA, feature 18); without it the first tile
     * instruction faults */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) {
        LOG_WARN("cpu: the OS refused AMX's tile state: AVX-512 kernels only");
        return;
    }
    g_amx = true;
#endif
}

bool strata_cpu_amx(void)
{
    pthread_once(&g_amx_once, amx_init_once);
    return g_amx;
}

const char *strata_cpu_describe(char *buf, size_t size)
{
    const strata_cpu *c = strata_cpu_get();
    if (buf == NULL || size == 0) return buf;

    char features[160] = "";
    static const struct {
        size_t offset;
        const char *name;
    } names[] = {
        {offsetof(strata_cpu, avx2), "avx2"},
        {offsetof(strata_cpu, fma), "fma"},
        {offsetof(strata_cpu, f16c), "f16c"},
        {offsetof(strata_cpu, avx512f), "avx512f"},
        {offsetof(strata_cpu, avx512bw), "avx512bw"},
        {offsetof(strata_cpu, avx512vl), "avx512vl"},
        {offsetof(strata_cpu, avx512vnni), "avx512vnni"},
        {offsetof(strata_cpu, avx512bf16), "avx512bf16"},
        {offsetof(strata_cpu, avx_vnni), "avx_vnni"},
        {offsetof(strata_cpu, amx_int8), "amx_int8"},
    };
    size_t used = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!*(const bool *)((const char *)c + names[i].offset)) continue;
        int k = snprintf(features + used, sizeof(features) - used, "%s%s", used ? " " : "",
                         names[i].name);
        if (k < 0 || (size_t)k >= sizeof(features) - used) break;
        used += (size_t)k;
    }

    const char *arch = c->x86_64 ? "x86-64" : c->aarch64 ? "aarch64" : "generic";
    char capped[48] = "";
    if (g_cap[0] != '\0')
        snprintf(capped, sizeof(capped), " (capped by STRATA_CPU=%s)", g_cap);
    snprintf(buf, size, "%s%s%s%s%s%s: %s; simd %s%s%s", arch, c->vendor[0] ? " " : "",
             c->vendor, c->brand[0] ? " (" : "", c->brand, c->brand[0] ? ")" : "",
             used ? features : "no simd features", strata_simd_level_name(g_level),
             strata_cpu_amx() ? " with amx" : "", capped);
    return buf;
}
