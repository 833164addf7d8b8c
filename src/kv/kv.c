/* KV cache storage. Layout [seq][layer][pos][kv_dim] keeps each (sequence, layer)'s rows
 * contiguous, so attention of a sequence reads one block and a pass writes its new rows in place. */
#include "specdec/kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io.h"

#define KV_HUGE_MIN ((size_t)32 << 20) /* bytes of K (or V) from which a cache takes 2 MiB pages */

struct sd_kv {
    int n_layers, n_ctx, kv_dim, n_seq;
    int *len;     /* [n_seq] */
    sd_type type; /* SD_TYPE_F32 or SD_TYPE_F16 elements */
    size_t esz;   /* bytes per element */
    void *k;      /* [n_seq][n_layers][n_ctx][kv_dim] */
    void *v;
};

sd_status sd_kv_create(int n_layers, int n_ctx, int kv_dim, sd_type type, int n_seq, sd_kv **out) {
    *out = NULL;
    if (n_layers <= 0 || n_ctx <= 0 || kv_dim <= 0 || n_seq <= 0)
        return sd_fail(SD_ERR_INVALID_ARG, "kv cache: bad shape layers=%d ctx=%d kv_dim=%d sequences=%d", n_layers,
                       n_ctx, kv_dim, n_seq);
    if (type != SD_TYPE_F32 && type != SD_TYPE_F16)
        return sd_fail(SD_ERR_UNSUPPORTED, "kv cache: element type %d (f32 or f16)", (int)type);
    const size_t esz = type == SD_TYPE_F16 ? 2 : 4;
    /* Checked before any allocation: a cache larger than the machine's memory is refused
     * with the bytes it needs, rather than left to malloc (or overcommit, or a sanitizer). */
    const double need = 2.0 * n_layers * (double)n_ctx * kv_dim * (double)esz * n_seq;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    const size_t per = (size_t)n_layers * (size_t)kv_dim;
    if (per > SIZE_MAX / esz / 2 / (size_t)n_ctx / (size_t)n_seq || (phys > 0 && need > phys))
        return sd_fail(SD_ERR_NOMEM,
                       "kv cache: %d layers x %d positions x %d %s (K and V)%s need %.0f bytes, more than the "
                       "machine's %.0f bytes of memory",
                       n_layers, n_ctx, kv_dim, esz == 2 ? "halves" : "floats", n_seq > 1 ? " x sequences" : "", need,
                       phys);
    const size_t bytes = per * (size_t)n_ctx * esz * (size_t)n_seq;
    sd_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return sd_fail(SD_ERR_NOMEM, "kv cache: out of memory");
    /* Large caches in 2 MiB pages: attention reads every sequence's rows of every layer each
     * pass (at 8 server slots and 80 positions, 47 MB a round: 11,500 TLB misses in 4 KiB pages).
     * Small ones stay in malloc's pages: each 2 MiB page faulted in takes a free 2 MiB run of
     * memory (compacting for it when memory is fragmented), and test_spec's many small contexts
     * took 100 s instead of 9 with every cache in huge pages (measured: the commit adding
     * KV_HUGE_MIN). */
    const int huge = bytes >= KV_HUGE_MIN;
    kv->k = huge ? sd_huge_alloc(bytes) : malloc(bytes);
    kv->v = huge ? sd_huge_alloc(bytes) : malloc(bytes);
    kv->len = calloc((size_t)n_seq, sizeof *kv->len);
    if (!kv->k || !kv->v || !kv->len) {
        sd_kv_free(kv);
        return sd_fail(SD_ERR_NOMEM, "kv cache: cannot allocate %zu bytes (%d layers x %d positions x %d %s x %d sequences, K and V)",
                       2 * bytes, n_layers, n_ctx, kv_dim, esz == 2 ? "halves" : "floats", n_seq);
    }
    kv->type = type;
    kv->esz = esz;
    kv->n_layers = n_layers;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->n_seq = n_seq;
    *out = kv;
    return SD_OK;
}

void sd_kv_free(sd_kv *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->len);
    free(kv);
}

int sd_kv_n_seq(const sd_kv *kv) { return kv->n_seq; }
int sd_kv_capacity(const sd_kv *kv) { return kv->n_ctx; }
int sd_kv_kv_dim(const sd_kv *kv) { return kv->kv_dim; }
int sd_kv_n_layers(const sd_kv *kv) { return kv->n_layers; }
sd_type sd_kv_type(const sd_kv *kv) { return kv->type; }

static int seq_ok(const sd_kv *kv, int seq) { return seq >= 0 && seq < kv->n_seq; }

int sd_kv_len(const sd_kv *kv, int seq) { return seq_ok(kv, seq) ? kv->len[seq] : 0; }

sd_status sd_kv_truncate(sd_kv *kv, int seq, int n) {
    if (!seq_ok(kv, seq)) return sd_fail(SD_ERR_INVALID_ARG, "kv truncate: sequence %d not in [0, %d)", seq, kv->n_seq);
    if (n < 0 || n > kv->len[seq])
        return sd_fail(SD_ERR_INVALID_ARG, "kv truncate to %d: sequence %d holds %d positions", n, seq, kv->len[seq]);
    kv->len[seq] = n;
    return SD_OK;
}

sd_status sd_kv_advance(sd_kv *kv, int seq, int n) {
    if (!seq_ok(kv, seq)) return sd_fail(SD_ERR_INVALID_ARG, "kv advance: sequence %d not in [0, %d)", seq, kv->n_seq);
    if (n < 0 || n > kv->n_ctx - kv->len[seq])
        return sd_fail(SD_ERR_CONTEXT_FULL, "kv cache: %d more positions do not fit sequence %d (%d of %d used)", n,
                       seq, kv->len[seq], kv->n_ctx);
    kv->len[seq] += n;
    return SD_OK;
}

static size_t block_bytes(const sd_kv *kv) { return (size_t)kv->n_ctx * kv->kv_dim * kv->esz; }

void *sd_kv_k_data(sd_kv *kv, int seq, int layer) {
    return (uint8_t *)kv->k + ((size_t)seq * kv->n_layers + (size_t)layer) * block_bytes(kv);
}
void *sd_kv_v_data(sd_kv *kv, int seq, int layer) {
    return (uint8_t *)kv->v + ((size_t)seq * kv->n_layers + (size_t)layer) * block_bytes(kv);
}
float *sd_kv_k(sd_kv *kv, int seq, int layer) { return kv->type == SD_TYPE_F32 ? sd_kv_k_data(kv, seq, layer) : NULL; }
float *sd_kv_v(sd_kv *kv, int seq, int layer) { return kv->type == SD_TYPE_F32 ? sd_kv_v_data(kv, seq, layer) : NULL; }

sd_status sd_kv_keep_rows(sd_kv *kv, int seq, int base, const int32_t *rows, int n) {
    if (!seq_ok(kv, seq)) return sd_fail(SD_ERR_INVALID_ARG, "kv keep rows: sequence %d not in [0, %d)", seq, kv->n_seq);
    const int len = kv->len[seq];
    if (base < 0 || base > len || n < 0 || n > len - base)
        return sd_fail(SD_ERR_INVALID_ARG, "kv keep rows: %d rows after %d, sequence %d holds %d", n, base, seq, len);
    for (int i = 0; i < n; i++)
        if (rows[i] < base + i || rows[i] >= len || (i > 0 && rows[i] <= rows[i - 1]))
            return sd_fail(SD_ERR_INVALID_ARG, "kv keep rows: row %d (entry %d) is not increasing inside [%d, %d)",
                           (int)rows[i], i, base, len);
    const size_t row = (size_t)kv->kv_dim * kv->esz;
    for (int l = 0; l < kv->n_layers; l++) {
        uint8_t *K = sd_kv_k_data(kv, seq, l), *V = sd_kv_v_data(kv, seq, l);
        for (int i = 0; i < n; i++) {
            if (rows[i] == base + i) continue; /* already in place */
            memcpy(K + (size_t)(base + i) * row, K + (size_t)rows[i] * row, row);
            memcpy(V + (size_t)(base + i) * row, V + (size_t)rows[i] * row, row);
        }
    }
    kv->len[seq] = base + n;
    return SD_OK;
}

sd_status sd_kv_copy(sd_kv *kv, int src, int dst, int n) {
    if (!seq_ok(kv, src) || !seq_ok(kv, dst) || src == dst || n < 0 || n > kv->len[src])
        return sd_fail(SD_ERR_INVALID_ARG, "kv cache: copy %d positions of sequence %d (length %d) into %d", n, src,
                       seq_ok(kv, src) ? kv->len[src] : -1, dst);
    const size_t bytes = (size_t)n * kv->kv_dim * kv->esz;
    for (int l = 0; l < kv->n_layers; l++) {
        memcpy(sd_kv_k_data(kv, dst, l), sd_kv_k_data(kv, src, l), bytes);
        memcpy(sd_kv_v_data(kv, dst, l), sd_kv_v_data(kv, src, l), bytes);
    }
    kv->len[dst] = n;
    return SD_OK;
}

size_t sd_kv_bytes_per_token(const sd_kv *kv) { return 2 * (size_t)kv->n_layers * kv->kv_dim * kv->esz; }
size_t sd_kv_bytes_used(const sd_kv *kv) {
    size_t n = 0;
    for (int s = 0; s < kv->n_seq; s++) n += (size_t)kv->len[s];
    return sd_kv_bytes_per_token(kv) * n;
}
size_t sd_kv_bytes_reserved(const sd_kv *kv) {
    return sd_kv_bytes_per_token(kv) * (size_t)kv->n_ctx * (size_t)kv->n_seq;
}
