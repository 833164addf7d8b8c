/* What this CPU runs (CPUID and XGETBV), the choice of the kernels' path once at first use
 * (the best, or SPECDEC_ISA's), and the cache sizes (sysfs, else CPUID; read once). */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/isa.h"
#include "kernels/portable.h"

#if SD_KERNELS_X86
#include <cpuid.h>
#endif

static const char *const k_isa_names[SD_ISA_COUNT] = {"portable", "avx2", "avx512"};

const char *sd_isa_name(sd_isa isa) { return isa >= 0 && isa < SD_ISA_COUNT ? k_isa_names[isa] : "?"; }

#if SD_KERNELS_X86
/* A CPU feature: CPUID leaf (sub-leaf 0), register (0..3: EAX..EDX) and bit, and the name GCC's
 * -m flag and /proc/cpuinfo give it. */
typedef struct {
    unsigned leaf;
    int reg, bit;
    const char *name;
} cpu_feature;

enum { EAX, EBX, ECX, EDX };

/* What each path's code may execute: the generic code's baseline (CMakeLists.txt: -march=x86-64-v2),
 * then the flags its own files are compiled with. A path needs its row and every row above it. */
static const cpu_feature k_baseline[] = {
    {1, ECX, 0, "sse3"}, {1, ECX, 9, "ssse3"}, {1, ECX, 19, "sse4_1"}, {1, ECX, 20, "sse4_2"},
    {1, ECX, 23, "popcnt"}, {1, ECX, 13, "cx16"}, {0x80000001, ECX, 0, "lahf_lm"},
};
static const cpu_feature k_avx2[] = {
    {1, ECX, 28, "avx"}, {7, EBX, 5, "avx2"}, {1, ECX, 12, "fma"}, {1, ECX, 29, "f16c"},
};
static const cpu_feature k_avx512[] = {
    {7, EBX, 16, "avx512f"},    {7, EBX, 30, "avx512bw"},   {7, EBX, 31, "avx512vl"}, {7, EBX, 17, "avx512dq"},
    {7, ECX, 11, "avx512_vnni"}, {7, ECX, 1, "avx512vbmi"}, {7, ECX, 8, "gfni"},
};

static int cpu_bit(const cpu_feature *f) {
    unsigned r[4] = {0, 0, 0, 0};
    const unsigned top = __get_cpuid_max(f->leaf & 0x80000000u, NULL);
    if (top < f->leaf) return 0;
    __cpuid_count(f->leaf, 0, r[0], r[1], r[2], r[3]);
    return (r[f->reg] >> f->bit) & 1;
}

/* The register state the OS saves (XCR0), 0 without OSXSAVE: AVX needs bits 1-2 (SSE, YMM),
 * AVX-512 also bits 5-7 (opmask, ZMM0-15 upper halves, ZMM16-31). */
static unsigned long long os_xcr0(void) {
    if (!cpu_bit(&(cpu_feature){1, ECX, 27, "osxsave"})) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

/* Appends the features of list[0..n) this CPU lacks to why; returns how many. */
static int lacking(const cpu_feature *list, size_t n, char *why, size_t cap, size_t *o, int missing) {
    for (size_t i = 0; i < n; i++)
        if (!cpu_bit(&list[i])) {
            if (why && *o < cap) *o += (size_t)snprintf(why + *o, cap - *o, "%s%s", missing ? ", " : "", list[i].name);
            missing++;
        }
    return missing;
}
#endif

int sd_isa_cpu_has(sd_isa isa, char *why, size_t cap) {
    if (why && cap) why[0] = 0;
    if (isa < 0 || isa >= SD_ISA_COUNT) return 0;
#if SD_KERNELS_X86
    size_t o = 0;
    int missing = lacking(k_baseline, sizeof k_baseline / sizeof *k_baseline, why, cap, &o, 0);
    const unsigned long long xcr0 = isa >= SD_ISA_AVX2 ? os_xcr0() : 0;
    if (isa >= SD_ISA_AVX2) {
        missing = lacking(k_avx2, sizeof k_avx2 / sizeof *k_avx2, why, cap, &o, missing);
        if ((xcr0 & 0x6) != 0x6) {
            if (why && o < cap) o += (size_t)snprintf(why + o, cap - o, "%sthe OS's AVX state", missing ? ", " : "");
            missing++;
        }
    }
    if (isa >= SD_ISA_AVX512) {
        missing = lacking(k_avx512, sizeof k_avx512 / sizeof *k_avx512, why, cap, &o, missing);
        if ((xcr0 & 0xE6) != 0xE6) {
            if (why && o < cap) o += (size_t)snprintf(why + o, cap - o, "%sthe OS's AVX-512 state", missing ? ", " : "");
            missing++;
        }
    }
    return missing == 0;
#else
    if (isa != SD_ISA_PORTABLE && why && cap) snprintf(why, cap, "an x86-64 build");
    return isa == SD_ISA_PORTABLE;
#endif
}

/* The portable path: plain C everywhere. F16 and BF16 matrices are dequantised row by row
 * (matmul.c); the quantised types have integer kernels on the file layout (quant_portable.c). */
const sd_isa_kernels sd_kernels_portable = {
    .isa = SD_ISA_PORTABLE,
    .float_types = SD_TYPE_BIT(SD_TYPE_F32),
    .f32_packed = 1,
    .rows = sd_portable_rows,
    .dot = sd_portable_dot,
    .rope = sd_rope_ref,
    .softmax = sd_portable_softmax,
    .first_nonfinite = sd_portable_first_nonfinite,
    .swiglu = sd_portable_swiglu,
    .f32_to_f16 = sd_portable_f32_to_f16,
    .stream = sd_portable_stream,
    .attention = sd_portable_attention,
    .softmax_numerators = sd_portable_softmax_numerators,
    .race_scores = sd_portable_race_scores,
    .race_cands = sd_portable_race_cands,
    .row_argmax = sd_portable_row_argmax,
    .row_nonfinite = sd_portable_row_nonfinite,
    .act_token = sd_portable_act_token,
    .qrows = sd_portable_quant_rows,
};

static const sd_isa_kernels *table_of(sd_isa isa) {
#if SD_KERNELS_X86
    if (isa == SD_ISA_AVX512) return &sd_kernels_avx512;
    if (isa == SD_ISA_AVX2) return &sd_kernels_avx2;
#endif
    (void)isa;
    return &sd_kernels_portable;
}

/* The choice, made once. A refused SPECDEC_ISA leaves the best path in place for code that runs
 * kernels without loading a model (the bandwidth probe), and g_refusal says why for the rest. */
static _Atomic(const sd_isa_kernels *) g_active;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sd_isa g_best = SD_ISA_PORTABLE;
static int g_forced; /* SPECDEC_ISA chose the path */
static sd_status g_refusal_status = SD_OK;
static char g_refusal[256];

static void choose(void) {
    for (int i = SD_ISA_COUNT - 1; i >= 0; i--)
        if (sd_isa_cpu_has((sd_isa)i, NULL, 0)) {
            g_best = (sd_isa)i;
            break;
        }
    sd_isa pick = g_best;
    const char *env = getenv("SPECDEC_ISA");
    char lack[160];
    if (!sd_isa_cpu_has(SD_ISA_PORTABLE, lack, sizeof lack)) { /* running at all was luck */
        g_refusal_status = SD_ERR_UNSUPPORTED;
        snprintf(g_refusal, sizeof g_refusal,
                 "this CPU lacks %s, which all of this build's code may use (it is compiled for x86-64-v2)", lack);
    } else if (env && env[0]) {
        int named = -1;
        for (int i = 0; i < SD_ISA_COUNT; i++)
            if (!strcmp(env, k_isa_names[i])) named = i;
        char why[160];
        if (named < 0) {
            g_refusal_status = SD_ERR_INVALID_ARG;
            snprintf(g_refusal, sizeof g_refusal, "SPECDEC_ISA=%s names no kernel path: avx512, avx2 or portable", env);
        } else if (!sd_isa_cpu_has((sd_isa)named, why, sizeof why)) {
            g_refusal_status = SD_ERR_UNSUPPORTED;
            snprintf(g_refusal, sizeof g_refusal, "SPECDEC_ISA=%s: this CPU cannot run that path (it lacks %s); its best is %s",
                     env, why, k_isa_names[g_best]);
        } else {
            pick = (sd_isa)named;
            g_forced = 1;
        }
    }
    atomic_store_explicit(&g_active, table_of(pick), memory_order_release);
}

const sd_isa_kernels *sd_kernels(void) {
    const sd_isa_kernels *k = atomic_load_explicit(&g_active, memory_order_acquire);
    if (k) return k;
    pthread_once(&g_once, choose);
    return atomic_load_explicit(&g_active, memory_order_acquire);
}

sd_isa sd_isa_active(void) { return sd_kernels()->isa; }

sd_status sd_isa_status(void) {
    sd_kernels();
    return g_refusal_status == SD_OK ? SD_OK : sd_fail(g_refusal_status, "%s", g_refusal);
}

sd_status sd_isa_select(sd_isa isa) {
    char why[160];
    sd_kernels();
    if (!sd_isa_cpu_has(isa, why, sizeof why))
        return sd_fail(SD_ERR_UNSUPPORTED, "kernel path %s: this CPU lacks %s", sd_isa_name(isa), why);
    atomic_store_explicit(&g_active, table_of(isa), memory_order_release);
    return SD_OK;
}

void sd_isa_describe(char *buf, size_t cap) {
    const sd_isa a = sd_isa_active();
    size_t o = (size_t)snprintf(buf, cap, "%s (%s", k_isa_names[a],
                                g_forced ? "SPECDEC_ISA" : a == g_best ? "the best this CPU runs" : "selected");
    int others = 0;
    for (int i = SD_ISA_COUNT - 1; i >= 0; i--)
        if (i != (int)a && sd_isa_cpu_has((sd_isa)i, NULL, 0) && o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", others++ ? ", " : "; this CPU also runs ", k_isa_names[i]);
    if (o < cap) snprintf(buf + o, cap - o, ")");
}

int sd_cpu_threads(int n) { return sd_kernels_team(n); }

int sd_cpu_caches_cpuid(size_t *l2, size_t *l3) {
    *l2 = *l3 = 0;
#if SD_KERNELS_X86
    unsigned a, b, c, d;
    __cpuid(0, a, b, c, d);
    const unsigned max_leaf = a;
    const int amd = b == 0x68747541u; /* "Auth" of AuthenticAMD */
    unsigned leaf = 4;
    if (amd) { /* leaf 4 is reserved on AMD; 0x8000001D holds the same records with TopologyExtensions */
        if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x8000001Du) return 0;
        __cpuid(0x80000001u, a, b, c, d);
        if (!((c >> 22) & 1)) return 0;
        leaf = 0x8000001Du;
    } else if (max_leaf < 4) {
        return 0;
    }
    for (unsigned i = 0; i < 16; i++) {
        __cpuid_count(leaf, i, a, b, c, d);
        const unsigned type = a & 31, level = (a >> 5) & 7;
        if (type == 0) break;      /* no more caches */
        if (type == 2) continue;   /* instruction cache */
        const size_t bytes = (size_t)((b >> 22) + 1) * (((b >> 12) & 0x3FF) + 1) * ((b & 0xFFF) + 1) * ((size_t)c + 1);
        size_t *dst = level == 2 ? l2 : level == 3 ? l3 : NULL;
        if (dst && !*dst) *dst = bytes;
    }
#endif
    return (*l2 > 0) + (*l3 > 0);
}

/* ---------------------------------------------------------------- cache sizes: sysfs, else CPUID */

/* The first line of DIR/NAME into buf (newline stripped); 0, or -1 when unreadable. */
static int read_line(const char *dir, const char *name, char *buf, size_t cap) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\r\n")] = 0;
    return 0;
}

/* "32768K", "32M", "1G" or bytes; 0 for anything else. */
static size_t parse_cache_size(const char *s) {
    if (!isdigit((unsigned char)*s)) return 0;
    char *end;
    const unsigned long long v = strtoull(s, &end, 10);
    const int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift) end++;
    if (*end || v == 0 || v > (SIZE_MAX >> 30)) return 0;
    return (size_t)v << shift;
}

int sd_cache_sizes_sysfs(const char *dir, size_t *l2, size_t *l3) {
    *l2 = *l3 = 0;
    for (int i = 0; i < 16; i++) {
        char idx[4200], level[16], type[32], size[32];
        snprintf(idx, sizeof idx, "%s/index%d", dir, i);
        if (read_line(idx, "level", level, sizeof level) || read_line(idx, "type", type, sizeof type) ||
            read_line(idx, "size", size, sizeof size))
            continue;
        if (strcmp(type, "Unified") != 0 && strcmp(type, "Data") != 0) continue;
        size_t *dst = !strcmp(level, "2") ? l2 : !strcmp(level, "3") ? l3 : NULL;
        if (dst && !*dst) *dst = parse_cache_size(size);
    }
    return (*l2 > 0) + (*l3 > 0);
}

const char *sd_cache_source_name(sd_cache_source s) {
    return s == SD_CACHES_SYSFS ? "sysfs" : s == SD_CACHES_CPUID ? "CPUID" : "unknown";
}

double sd_cache_bytes_from(const char *dir, int cpuid, int threads, sd_cache_source *src) {
    size_t l2 = 0, l3 = 0;
    sd_cache_source s = SD_CACHES_UNKNOWN;
    if (sd_cache_sizes_sysfs(dir, &l2, &l3) == 2) s = SD_CACHES_SYSFS;
    else if (cpuid && sd_cpu_caches_cpuid(&l2, &l3) > 0 && l3 > 0) s = SD_CACHES_CPUID;
    if (src) *src = s;
    return s == SD_CACHES_UNKNOWN ? 0 : (double)l3 + (double)l2 * threads;
}

/* This machine's sizes, read once per process: the draft controller asks at every engine's
 * creation (batch.c), and test_spec creates thousands. */
static pthread_once_t g_caches_once = PTHREAD_ONCE_INIT;
static double g_l3, g_l2;
static sd_cache_source g_caches_src;

static void caches_once(void) {
    g_l3 = sd_cache_bytes_from("/sys/devices/system/cpu/cpu0/cache", 1, 0, &g_caches_src);
    g_l2 = sd_cache_bytes_from("/sys/devices/system/cpu/cpu0/cache", 1, 1, NULL) - g_l3;
}

double sd_cache_bytes(int threads, sd_cache_source *src) {
    pthread_once(&g_caches_once, caches_once);
    if (src) *src = g_caches_src;
    return g_caches_src == SD_CACHES_UNKNOWN ? 0 : g_l3 + g_l2 * threads;
}
