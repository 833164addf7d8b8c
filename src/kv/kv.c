/* KV cache storage. Layout [layer][pos][kv_dim] keeps each layer's keys contiguous so the
 * batched pass writes k/v projections for positions [len, len+n) straight into the cache. */
#include "specdec/kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

struct sd_kv {
    int n_layers, n_ctx, kv_dim, len;
    sd_type type;   /* SD_TYPE_F32 or SD_TYPE_F16 elements */
    size_t esz;     /* bytes per element */
    void *k; /* [n_layers][n_ctx][kv_dim] */
    void *v; /* [n_layers][n_ctx][kv_dim] */
};

sd_status sd_kv_create(int n_layers, int n_ctx, int kv_dim, sd_kv **out) {
    return sd_kv_create_typed(n_layers, n_ctx, kv_dim, SD_TYPE_F32, out);
}

sd_status sd_kv_create_typed(int n_layers, int n_ctx, int kv_dim, sd_type type, sd_kv **out) {
    *out = NULL;
    if (n_layers <= 0 || n_ctx <= 0 || kv_dim <= 0)
        return sd_fail(SD_ERR_INVALID_ARG, "kv cache: bad shape layers=%d ctx=%d kv_dim=%d",
                       n_layers, n_ctx, kv_dim);
    if (type != SD_TYPE_F32 && type != SD_TYPE_F16)
        return sd_fail(SD_ERR_UNSUPPORTED, "kv cache: element type %d (f32 or f16)", (int)type);
    const size_t esz = type == SD_TYPE_F16 ? 2 : 4;
    /* Checked before any allocation: a cache larger than the machine's memory is refused
     * with the bytes it needs, rather than left to malloc (or overcommit, or a sanitizer). */
    const double need = 2.0 * n_layers * (double)n_ctx * kv_dim * (double)esz;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const double phys = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    size_t per = (size_t)n_layers * (size_t)kv_dim;
    if (per > SIZE_MAX / esz / 2 / (size_t)n_ctx || (phys > 0 && need > phys))
        return sd_fail(SD_ERR_NOMEM,
                       "kv cache: %d layers x %d positions x %d %s (K and V) need %.0f bytes, more than the machine's %.0f bytes of memory",
                       n_layers, n_ctx, kv_dim, esz == 2 ? "halves" : "floats", need, phys);
    size_t bytes = per * (size_t)n_ctx * esz;
    sd_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return sd_fail(SD_ERR_NOMEM, "kv cache: out of memory");
    kv->k = malloc(bytes);
    kv->v = malloc(bytes);
    if (!kv->k || !kv->v) {
        sd_kv_free(kv);
        return sd_fail(SD_ERR_NOMEM, "kv cache: cannot allocate %zu bytes (%d layers x %d positions x %d %s, K and V)",
                       2 * bytes, n_layers, n_ctx, kv_dim, esz == 2 ? "halves" : "floats");
    }
    kv->type = type;
    kv->esz = esz;
    kv->n_layers = n_layers;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    *out = kv;
    return SD_OK;
}

void sd_kv_free(sd_kv *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv);
}

int sd_kv_len(const sd_kv *kv) { return kv->len; }
int sd_kv_capacity(const sd_kv *kv) { return kv->n_ctx; }
int sd_kv_kv_dim(const sd_kv *kv) { return kv->kv_dim; }
int sd_kv_n_layers(const sd_kv *kv) { return kv->n_layers; }

sd_status sd_kv_truncate(sd_kv *kv, int n) {
    if (n < 0 || n > kv->len)
        return sd_fail(SD_ERR_INVALID_ARG, "kv truncate to %d: cache holds %d positions", n, kv->len);
    kv->len = n;
    return SD_OK;
}

sd_status sd_kv_advance(sd_kv *kv, int n) {
    if (n < 0 || n > kv->n_ctx - kv->len)
        return sd_fail(SD_ERR_CONTEXT_FULL, "kv cache: %d more positions do not fit (%d of %d used)",
                       n, kv->len, kv->n_ctx);
    kv->len += n;
    return SD_OK;
}

void *sd_kv_k_data(sd_kv *kv, int layer) {
    return (uint8_t *)kv->k + (size_t)layer * kv->n_ctx * kv->kv_dim * kv->esz;
}
void *sd_kv_v_data(sd_kv *kv, int layer) {
    return (uint8_t *)kv->v + (size_t)layer * kv->n_ctx * kv->kv_dim * kv->esz;
}
float *sd_kv_k(sd_kv *kv, int layer) { return kv->type == SD_TYPE_F32 ? sd_kv_k_data(kv, layer) : NULL; }
float *sd_kv_v(sd_kv *kv, int layer) { return kv->type == SD_TYPE_F32 ? sd_kv_v_data(kv, layer) : NULL; }
sd_type sd_kv_type(const sd_kv *kv) { return kv->type; }

size_t sd_kv_bytes_per_token(const sd_kv *kv) { return 2 * (size_t)kv->n_layers * kv->kv_dim * kv->esz; }
size_t sd_kv_bytes_used(const sd_kv *kv) { return sd_kv_bytes_per_token(kv) * (size_t)kv->len; }
size_t sd_kv_bytes_reserved(const sd_kv *kv) { return sd_kv_bytes_per_token(kv) * (size_t)kv->n_ctx; }
