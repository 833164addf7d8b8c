/* The CPU as the kernels see it: which instruction-set path runs (one build carries the
 * AVX-512, AVX2 and portable kernels and picks by CPUID once, at first use; SPECDEC_ISA forces
 * a lower one), and the cache sizes the CPU reports. */
#ifndef SPECDEC_CPU_H
#define SPECDEC_CPU_H

#include <stddef.h>

#include "specdec/status.h"

typedef enum {
    SD_ISA_PORTABLE, /* C only: any x86-64-v2 CPU, or another architecture */
    SD_ISA_AVX2,     /* AVX2 with FMA and F16C (AMD Zen 1-3, Intel Haswell to Comet Lake) */
    SD_ISA_AVX512,   /* AVX-512 F/BW/VL/DQ with VNNI, VBMI and GFNI (AMD Zen 4/5, Intel Ice Lake on) */
    SD_ISA_COUNT
} sd_isa;

/* "portable", "avx2", "avx512": the names SPECDEC_ISA takes. */
const char *sd_isa_name(sd_isa isa);

/* 1 when this build carries the path and this CPU (and its OS, for the vector registers' state)
 * runs it; else 0, with what is missing in why ("avx512vnni, gfni"; may be NULL). */
int sd_isa_cpu_has(sd_isa isa, char *why, size_t cap);

/* The path the kernels run: SPECDEC_ISA's when set and runnable, else the best this CPU runs. */
sd_isa sd_isa_active(void);

/* SD_OK, or the refusal of SPECDEC_ISA (a name that is no path: SD_ERR_INVALID_ARG; a path this
 * CPU cannot run: SD_ERR_UNSUPPORTED), with its message in sd_last_error(). Model loading fails
 * with it: the kernels never run a path other than the one asked for. */
sd_status sd_isa_status(void);

/* One line for `specdec --version`, `info` and `bench-decode`: the path running, why (best on this
 * CPU, or SPECDEC_ISA) and the other paths this CPU runs, e.g. "avx2 (SPECDEC_ISA; this CPU also
 * runs avx512, portable)". */
void sd_isa_describe(char *buf, size_t cap);

/* The threads a context asking for n gets (sd_context_params.n_threads): n, or for n < 1 the
 * calling thread's OpenMP default (OMP_NUM_THREADS, else the CPUs); at most OMP_THREAD_LIMIT. */
int sd_cpu_threads(int n);

/* Bytes of the level-2 and level-3 caches of the core running the caller, from CPUID (leaf 4 on
 * Intel, 0x8000001D on AMD): unified or data caches; 0 where the CPU does not describe a level.
 * Returns the number of the two levels found. */
int sd_cpu_caches_cpuid(size_t *l2, size_t *l3);

/* Sizes in bytes of a CPU's level-2 and level-3 caches from its Linux sysfs cache directory
 * (DIR/indexN/level, type and size, e.g. /sys/devices/system/cpu/cpu0/cache): unified or data
 * caches only; a size is "1024K", "32M" or plain bytes. 0 where a level is absent or
 * unreadable. Returns the number of the two levels found. */
int sd_cache_sizes_sysfs(const char *dir, size_t *l2, size_t *l3);

/* Where cache sizes came from: nowhere trustworthy, the kernel's sysfs entries, or the CPU's
 * cache-description leaves (CPUID 4 on Intel, 0x8000001D on AMD). */
typedef enum { SD_CACHES_UNKNOWN, SD_CACHES_SYSFS, SD_CACHES_CPUID } sd_cache_source;
const char *sd_cache_source_name(sd_cache_source s); /* "unknown", "sysfs", "CPUID" */

/* Bytes of last-level cache plus the L2 of `threads` cores, the most weights that can stay
 * cached between decode steps, from the sysfs directory dir (DIR/indexN, as above) when it
 * gives both levels, else (when cpuid) from CPUID when it gives an L3, else 0: unknown. Never
 * glibc's sysconf, which on AMD EPYC guests reads the legacy leaf 0x80000006 that the
 * hypervisor fills with 320-508 MiB of L3 (so a 438 MB model "fit in the caches"), nor a guess.
 * *src (may be NULL) says which. sd_cache_bytes: /sys/devices/system/cpu/cpu0/cache, then CPUID,
 * read once per process. */
double sd_cache_bytes_from(const char *dir, int cpuid, int threads, sd_cache_source *src);
double sd_cache_bytes(int threads, sd_cache_source *src);

#endif
