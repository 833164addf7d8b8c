/* The one place that says which instruction sets the kernels were compiled for (-march), and the
 * run-time check that this CPU has them: a binary built on one machine and run on an older one
 * is refused with the missing feature named, instead of dying of SIGILL mid-generation. */
#ifndef SD_KERNELS_CPU_H
#define SD_KERNELS_CPU_H

#include <stddef.h>

/* AVX-512 F: the float kernels' fast paths (matvec, GEMM tiles, attention, f16 caches). */
#if defined(__AVX512F__)
#define SD_HAVE_AVX512 1
#else
#define SD_HAVE_AVX512 0
#endif

/* The integer kernels of the quantised types: AVX-512 F/BW/VL/DQ with VNNI dot products, VBMI
 * byte permutes and GFNI. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && defined(__GFNI__)
#define SD_QDOT 1
#else
#define SD_QDOT 0
#endif

/* 0 when this CPU runs every instruction set the build assumed; else -1 with the missing
 * features named in why ("avx512vnni, gfni"). */
int sd_cpu_check(char *why, size_t cap);

#endif
