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

/* AVX2 with FMA and F16C, on CPUs without AVX-512 (AMD Zen 2/3, Intel before Ice Lake): the
 * float kernels' second set of fast paths (kernels_avx2.c). A build has one of the two. */
#if !SD_HAVE_AVX512 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SD_HAVE_AVX2 1
#else
#define SD_HAVE_AVX2 0
#endif

/* The integer kernels of the quantised types: AVX-512 F/BW/VL/DQ with VNNI dot products, VBMI
 * byte permutes and GFNI (quant_avx512.c); else AVX2 with FMA and F16C (quant_avx2.c, the same
 * layouts and entry points). SD_QKERNELS: the build has one of the two. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__AVX512VBMI__) && defined(__GFNI__)
#define SD_QDOT 1
#else
#define SD_QDOT 0
#endif
#if !SD_QDOT && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SD_QDOT2 1
#else
#define SD_QDOT2 0
#endif
#define SD_QKERNELS (SD_QDOT || SD_QDOT2)

/* Software prefetch of streamed weights (the F32/F16/BF16 and integer matrix kernels): this
 * many bytes ahead of the row being read, into L2 (T1). On the AMD EPYC (Zen 4) guest it beat
 * both the hardware prefetchers alone and 4 KiB ahead into L1; the measurements are beside the
 * kernels (kernels.c matvec and multi, quant_avx512.c). Used with <immintrin.h>. */
#define SD_WEIGHT_PREFETCH_BYTES 8192
#define SD_WEIGHT_PREFETCH_HINT _MM_HINT_T1

/* 0 when this CPU runs every instruction set the build assumed; else -1 with the missing
 * features named in why ("avx512vnni, gfni"). */
int sd_cpu_check(char *why, size_t cap);

#endif
