/* CPU feature detection and the SIMD level the kernels may use.
 *
 * Features are read once per process (CPUID, and XGETBV for whether the OS
 * saves the YMM/ZMM registers across context switches: a CPU that has
 * AVX-512 under an OS that does not enable its state must not use it). The
 * level is what kernel tables pick their variants from; the environment
 * variable STRATA_CPU=scalar|avx2|avx512 caps it, so tests and benchmarks can
 * force a slower path on a faster machine. Both are fixed for the life of the
 * process: STRATA_CPU is read by the first call into this module, so set it
 * before any thread starts. */
#ifndef STRATA_BASE_CPU_H
#define STRATA_BASE_CPU_H

#include <stdbool.h>
#include <stddef.h>

/* What the CPU and the OS together allow. Every flag is false on a machine
 * that is not x86-64, and false when the OS does not enable the register
 * state the instructions need. */
typedef struct strata_cpu {
    bool x86_64;      /* built for and running on x86-64 */
    bool aarch64;     /* built for AArch64 (NEON is part of the base ISA) */
    bool os_ymm;      /* XCR0 enables SSE and AVX (YMM) state */
    bool os_zmm;      /* XCR0 also enables opmask and ZMM state */
    bool avx2;
    bool fma;
    bool f16c;
    bool avx512f;
    bool avx512bw;
    bool avx512vl;
    bool avx512vnni;
    bool avx512bf16;
    bool avx_vnni;    /* the VEX (256-bit) form of VNNI */
    bool amx_int8;    /* AMX tiles with int8 dot products (AMX-TILE and AMX-INT8),
                         XCR0 enabling the tile state; using them also needs the
                         OS's permission (strata_cpu_amx) */
    char vendor[13];  /* "GenuineIntel", "AuthenticAMD", ... or "" */
    char brand[49];   /* the processor's brand string, or "" */
} strata_cpu;

/* Ordered: a level implies everything below it. */
enum strata_simd_level {
    STRATA_SIMD_SCALAR = 0, /* portable C only */
    STRATA_SIMD_AVX2 = 1,   /* avx2 + fma + f16c */
    STRATA_SIMD_AVX512 = 2, /* the AVX2 level + avx512 f, bw, vl and vnni */
};

/* The detected features. The pointer is to static storage, valid for the
 * life of the process; detection runs once (thread-safe) on the first call
 * from any thread. STRATA_CPU does not change what is reported here. */
const strata_cpu *strata_cpu_get(void);

/* The level kernels may use: the highest level the features allow, capped
 * by STRATA_CPU when it is set. Read once; the same value for the whole
 * process. An unknown STRATA_CPU value is ignored with a warning in the
 * log. */
enum strata_simd_level strata_cpu_level(void);

/* The highest level the features allow, ignoring STRATA_CPU. */
enum strata_simd_level strata_cpu_level_max(const strata_cpu *cpu);

/* The level for cpu capped by cap, a STRATA_CPU value ("scalar", "avx2",
 * "avx512"; case ignored; NULL, "" and "auto" mean no cap). A cap never
 * raises the level. Returns -1 (and nothing else changes) when cap is not
 * one of those words. Pure: strata_cpu_level() is this function applied to
 * strata_cpu_get() and getenv("STRATA_CPU"), so tests can exercise any
 * combination without a machine that has it. */
int strata_cpu_level_capped(const strata_cpu *cpu, const char *cap);

/* Whether kernels may use AMX's int8 tiles: the CPU has them (amx_int8),
 * the level is AVX512 (so STRATA_CPU=avx2 or scalar turns them off too),
 * STRATA_AMX is not "0", and the OS granted this process the tile state
 * (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once, on the first call;
 * the grant covers every thread). The AMX kernels compute the same bits
 * as the AVX512 level's (pack_internal.h), so this changes speed only.
 * Fixed for the life of the process. */
bool strata_cpu_amx(void);

/* "scalar", "avx2" or "avx512". */
const char *strata_simd_level_name(enum strata_simd_level level);

/* A one-line description for logs, e.g.
 * "x86-64 GenuineIntel (Intel(R) Xeon(R) ...): avx2 fma f16c; simd avx2".
 * Writes at most size bytes including the terminating NUL (truncating) and
 * returns buf. */
const char *strata_cpu_describe(char *buf, size_t size);

#endif
